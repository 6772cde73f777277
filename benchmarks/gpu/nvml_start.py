"""What the cuda platform costs a session's start, step by step, in a process that has loaded pytest (as
a session's has): importing pynvml, ``nvmlInit``, the rest of ``detect`` (count, driver), the device list,
and the first memory reading. Milliseconds, each step's own; run in fresh processes ``--runs`` times.

    python3 benchmarks/gpu/nvml_start.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = [
        json.loads(
            subprocess.run([sys.executable, "-c", STEPS], check=True, capture_output=True, text=True).stdout
        )
        for _ in range(parser.parse_args().runs)
    ]
    for n, name in enumerate(NAMES):
        print(f"{name}: {' '.join(f'{run[n]:.1f}' for run in runs)} ms")


if __name__ == "__main__":
    main()
