"""A stand-in for a vLLM engine on a fake GPU, for the plugin's pytester suites.

It goes through the same recording path as an instrumented ``vllm.LLM`` (``harness.starts.starting``
with its declared ``gpu_memory_utilization``) and, while alive, takes that share of the fake device's
memory in ``FAKE_GPUS_FILE``, as a real engine takes VRAM: in an engine process, a child of the test
process, which the fake NVML lists with its bytes. Like vLLM it refuses to start on too little; a leaky
one leaves its engine process alive, holding ``leak_bytes``, after its stop.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

from harness.tracking import context, starts
from tests import fakes


def _take(delta: int, pid: int | None = None) -> int:
    """Add ``delta`` used bytes to this process's first visible fake GPU, listed under ``pid`` when given
    (an engine process); returns the device's free bytes before."""
    path = Path(os.environ["FAKE_GPUS_FILE"])
    uuid = context.current().platform.devices()[0].uuid
    with open(f"{path}.lock", "w") as lock:  # xdist workers share the file, each its own GPU entry
        fcntl.flock(lock, fcntl.LOCK_EX)
        gpus = json.loads(path.read_text())
        gpu = next(g for g in gpus if g["uuid"] == uuid)
        free = gpu["total"] - gpu["used"]
        gpu["used"] += delta
        if pid is not None:
            processes = gpu.setdefault("processes", {})
            processes[str(pid)] = processes.get(str(pid), 0) + delta
        fakes.write(path, gpus)
    return free


def _engine_process() -> subprocess.Popen:
    engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    atexit.register(engine.kill)  # a leaked engine goes with the test process, as vLLM's would
    return engine


class FakeRunner:
    def __init__(self, model: str, gpu_memory_utilization: float = 0.9, leak_bytes: int = 0):
        total = context.current().platform.devices()[0].total_bytes
        config = {"model": model, "gpu_memory_utilization": gpu_memory_utilization}
        self.held = int(gpu_memory_utilization * total)
        self.leak_bytes = leak_bytes
        with starts.starting("vllm", model, config, fraction=gpu_memory_utilization) as run:
            self.engine = _engine_process()
            free = _take(self.held, self.engine.pid)
            if free < self.held:
                self._exit(self.held)
                raise ValueError(f"Free memory on device ({free} B) is less than desired ({self.held} B)")
        self.run = run

    def _exit(self, held: int) -> None:
        _take(-held, self.engine.pid)
        self.engine.kill()
        self.engine.wait()

    def close(self) -> None:
        if self.held:
            if self.leak_bytes:
                _take(self.leak_bytes - self.held, self.engine.pid)  # the engine process lives on
            else:
                self._exit(self.held)
            self.held = 0
            if self.run is not None:
                self.run.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
