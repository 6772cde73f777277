"""Backs docs/measurements.md § Plugin overhead and § Garbage-collection freeze (through plugin_overhead.py
and gc_freeze.py, which print the figures): the suite of trivial tests they run, the environment they run
it in, a timed pytest process, and the median's confidence interval."""

from __future__ import annotations

import contextlib
import math
import os
import queue
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

FILE = "test_trivial.py"
ARGS = ["-q", "-p", "no:cacheprovider", FILE]  # no cache: runs stay alike
PYTEST = [sys.executable, "-m", "pytest", *ARGS]


def suite(directory: Path, tests: int) -> Path:
    """``directory/suite``: ``tests`` empty tests and a pyproject that is pytest's alone. The suite has a
    directory of its own because pytest lists the directory it collects from: 30 ledger directories there
    cost every later run, plain or not, 0.35 % more instructions."""
    root = directory / "suite"
    root.mkdir(parents=True)
    (root / FILE).write_text("".join(f"def test_{n}():\n    pass\n\n\n" for n in range(tests)))
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    return root


def environment() -> dict[str, str]:
    """This process's environment (its platform, or ``HARNESS_PLATFORM``), bytecode cached as for any
    installed package: with ``PYTHONDONTWRITEBYTECODE=1`` (set on some machines) every run compiled the
    harness's modules from source, which plain pytest's precompiled modules never pay."""
    return {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def ledger(args: list[str], directory: Path) -> list[str]:
    """The ledger directory of a run whose ``args`` ask for the harness: each run gets its own, as each
    harness run has (a reused one grows and is re-read); none for a plain run."""
    return [f"--harness-ledger-dir={directory}"] if "--harness" in args else []


def timed(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one ``PYTEST`` process with ``args``; CPU (user + system) moves less with the
    host's load."""
    started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(PYTEST + args, cwd=cwd, env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - started, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def timed_together(sides: list[list[str]], cwd: Path, env: dict[str, str]) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of ``PYTEST`` processes started at once, one per argument list: runs that share
    their moments share what the host's other load does to them. A failing one ends the others. Each is
    waited for by its own pid (a thread each), never ``wait4(-1)``: that would reap a child of the caller
    that is not one of these (an engine process a test left, in an xdist worker)."""
    started = time.perf_counter()
    out = subprocess.DEVNULL
    processes = [subprocess.Popen(PYTEST + args, cwd=cwd, env=env, stdout=out) for args in sides]
    ended: queue.Queue[tuple[int, int, resource.struct_rusage, float]] = queue.Queue()

    def reap(n: int, process: subprocess.Popen[bytes]) -> None:
        _, status, usage = os.wait4(process.pid, 0)  # its own CPU seconds, whenever it ends
        process.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait for it again
        ended.put((n, process.returncode, usage, time.perf_counter()))

    for n, process in enumerate(processes):
        threading.Thread(target=reap, args=(n, process), daemon=True).start()
    measured: list[tuple[float, float]] = [(0.0, 0.0)] * len(sides)
    for left in range(len(processes), 0, -1):
        n, code, usage, at = ended.get()
        if code != 0:
            for other in processes:
                if other.returncode is None:  # not Popen.kill: its poll() could reap it before its thread
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(other.pid, signal.SIGKILL)
            for _ in range(left - 1):  # every other one reaped before the error leaves
                ended.get()
            raise subprocess.CalledProcessError(code, PYTEST + sides[n])
        measured[n] = (at - started, usage.ru_utime + usage.ru_stime)
    return measured


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """An interval that holds the median of what ``values`` sample with at least ``confidence``: the order
    statistics the binomial law sets around the sample's median. It assumes nothing of the noise's shape
    (the GPU host's is skewed and per process); too few values give their whole range."""
    ordered, n = sorted(values), len(values)
    cut, below = -1, 0.0  # the most values cut off each end, and the chance of the median lying below
    while below + math.comb(n, cut + 1) / 2**n <= (1 - confidence) / 2:
        cut += 1
        below += math.comb(n, cut) / 2**n
    cut = max(cut, 0)
    return ordered[cut], ordered[n - 1 - cut]
