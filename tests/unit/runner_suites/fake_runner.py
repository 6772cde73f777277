"""A stand-in for a vLLM engine on a fake GPU, for the plugin's pytester suites.

It goes through the same recording path as an instrumented ``vllm.LLM`` (``harness.starts.starting``
with its declared ``gpu_memory_utilization``) and, while alive, takes that share of the fake device's
memory in ``FAKE_GPUS_FILE``, as a real engine takes VRAM; like vLLM it refuses to start on too little.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from harness.tracking import context, starts


def _take(delta: int) -> int:
    """Add ``delta`` used bytes to this process's first visible fake GPU; returns its free bytes before."""
    path = Path(os.environ["FAKE_GPUS_FILE"])
    uuid = context.current().platform.devices()[0].uuid
    with open(f"{path}.lock", "w") as lock:  # xdist workers share the file, each its own GPU entry
        fcntl.flock(lock, fcntl.LOCK_EX)
        gpus = json.loads(path.read_text())
        gpu = next(g for g in gpus if g["uuid"] == uuid)
        free = gpu["total"] - gpu["used"]
        gpu["used"] += delta
        Path(f"{path}.new").write_text(json.dumps(gpus))
        os.replace(f"{path}.new", path)  # readers never see a half-written file
    return free


class FakeRunner:
    def __init__(self, model: str, gpu_memory_utilization: float = 0.9, leak_bytes: int = 0):
        total = context.current().platform.devices()[0].total_bytes
        config = {"model": model, "gpu_memory_utilization": gpu_memory_utilization}
        self.held = int(gpu_memory_utilization * total)
        self.leak_bytes = leak_bytes
        with starts.starting("vllm", model, config, fraction=gpu_memory_utilization) as run:
            free = _take(self.held)
            if free < self.held:
                _take(-self.held)
                raise ValueError(f"Free memory on device ({free} B) is less than desired ({self.held} B)")
        self.run = run

    def close(self) -> None:
        if self.held:
            _take(self.leak_bytes - self.held)
            self.held = 0
            if self.run is not None:
                self.run.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
