"""What the cuda platform costs a session's start, step by step, in a process that has loaded pytest (as
a session's has): importing pynvml, ``nvmlInit``, the rest of ``detect`` (count, driver), the device list,
and the first memory reading. Milliseconds, each step's own; run in fresh processes ``--runs`` times.

Then what ``detect_later`` saves: fresh processes, alternately, run ``detect`` and then ~0.2 s of Python
(as a session's collection is), or ``detect_later``, the same Python, and ``ready()``; the medians of the
two, and the Python's own time before and after NVML started (whether NVML slows what runs after it), and
the threads NVML leaves with the CPU seconds they used.

    HARNESS_PLATFORM=cuda python3 benchmarks/gpu/nvml_start.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

STEPS = r"""
import importlib, json, time
import pytest, ctypes  # what a pytest process has loaded before the harness's configure
marks = [time.perf_counter()]
nvml = importlib.import_module("pynvml"); marks.append(time.perf_counter())
nvml.nvmlInit(); marks.append(time.perf_counter())
from harness.platform import detect
detection = detect(); marks.append(time.perf_counter())  # count and driver (the init is cached)
devices = detection.platform.devices(); marks.append(time.perf_counter())
detection.platform.memory(); marks.append(time.perf_counter())
print(json.dumps([round((b - a) * 1e3, 2) for a, b in zip(marks, marks[1:])]))
"""
NAMES = ("import pynvml", "nvmlInit", "detect (import harness.platform, count, driver, device list)",
         "devices()", "first memory()")  # fmt: skip

OVERLAP = r"""
import json, os, sys, time
import pytest
from harness.platform import detect, detect_later
sys.path.insert(0, sys.argv[2])  # benchmarks/
from trivial import thread_cpu

def python():  # pure Python, as collecting 2000 tests is: the interpreter's time, the GIL held
    started = time.perf_counter()
    sum(len(str(n)) for n in range(1_200_000))
    return time.perf_counter() - started

def threads():  # every thread but this one: (name, CPU seconds)
    others = [int(task) for task in os.listdir("/proc/self/task") if int(task) != os.getpid()]
    return [(open(f"/proc/self/task/{t}/comm").read().strip(), thread_cpu(t)) for t in others]

before = python()
started = time.perf_counter()
if sys.argv[1] == "thread":
    pending = detect_later()
    python()
    pending.ready()
else:
    detect()
    python()
both = time.perf_counter() - started
after = python()
print(json.dumps({"both": both, "before": before, "after": after, "threads": threads()}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    steps = [json.loads(run(STEPS)) for _ in range(runs)]
    for n, name in enumerate(NAMES):
        print(f"{name}: {' '.join(f'{step[n]:.1f}' for step in steps)} ms")
    ways: dict[str, list[dict]] = {"line": [], "thread": []}
    for n in range(2 * runs):
        way = ("line", "thread")[n % 2]
        ways[way].append(json.loads(run(OVERLAP, way, str(Path(__file__).resolve().parents[1]))))
    for way, found in ways.items():
        both = statistics.median(f["both"] for f in found) * 1e3
        slower = statistics.median(f["after"] / f["before"] for f in found)
        print(
            f"detect {'in line' if way == 'line' else 'in a thread'}, then 0.2 s of Python: {both:.1f} ms "
            f"(median of {runs}); the Python after NVML started / before: {slower:.3f}; "
            f"threads left: {found[-1]['threads']}"
        )


def run(code: str, *args: str) -> str:
    command = [sys.executable, "-c", code, *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


if __name__ == "__main__":
    main()
