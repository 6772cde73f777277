"""A pytest plugin for benchmarks/session_phases.py: the wall-clock moments a session passes, written as
one JSON line to ``$PHASE_CLOCK_FILE`` at exit, with the threads it had, the main thread's CPU seconds
(the rest of the process's are its other threads', a library's pool among them) and the cyclic garbage
collector's passes and seconds. Loaded with ``-p phase_clock`` on both sides of a
comparison, so its own cost is alike on both."""

from __future__ import annotations

import atexit
import gc
import json
import os
import time

import pytest
from trivial import thread_cpu  # session_phases puts benchmarks/ on PYTHONPATH

MARKS: dict[str, float] = {"loaded": time.time()}
THREADS: dict[str, int] = {}
GC = {"collections": [0, 0, 0], "seconds": 0.0, "began": 0.0}  # the cyclic collector's passes and their time


def _collecting(phase: str, info: dict) -> None:
    if phase == "start":
        GC["began"] = time.perf_counter()
        return
    GC["collections"][info["generation"]] += 1
    GC["seconds"] += time.perf_counter() - GC["began"]


gc.callbacks.append(_collecting)


def _threads() -> int:
    """The process's threads, the native ones (a library's pool) included."""
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 0


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    MARKS["configured"] = time.time()
    THREADS["configured"] = _threads()
    config.add_cleanup(lambda: MARKS.setdefault("cleaned", time.time()))  # after every unconfigure hook


@pytest.hookimpl(trylast=True)
def pytest_collection_finish() -> None:
    MARKS["collected"] = time.time()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol() -> None:
    MARKS.setdefault("first", time.time())


@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish() -> None:
    MARKS["last"] = time.time()


@atexit.register  # registered first, so it runs after every later atexit handler
def _write() -> None:
    MARKS["exiting"] = time.time()
    THREADS["exiting"] = _threads()
    path = os.environ.get("PHASE_CLOCK_FILE")
    if path:
        with open(path, "a") as file:
            noted = {"marks": MARKS, "threads": THREADS, "gc": GC, "main_cpu": thread_cpu(os.getpid())}
            file.write(json.dumps(noted) + "\n")
