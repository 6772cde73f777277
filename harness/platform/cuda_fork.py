"""Whether this process has initialized the CUDA driver, read without initializing it, and what that means
for a vLLM engine process forked from it.

A process that called ``cuInit`` cannot fork a child that uses CUDA: the child's first CUDA call fails with
``CUDA error: initialization error``. vLLM chooses ``fork`` or ``spawn`` for its engine process from torch's
flag (``torch.cuda.is_initialized()``), which torch sets only when it made a context itself; a test that
calls ``torch.cuda.is_available()`` (transformers does, loading a model on the CPU) initializes the driver
without that flag, so vLLM forks and its EngineCore dies, the parent saying only "Engine core initialization
failed". The fact read here is the driver's own: ``cuDeviceGetCount`` answers CUDA_ERROR_NOT_INITIALIZED
until ``cuInit`` ran, and calling it initializes nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

MAPS = Path("/proc/self/maps")
DRIVER = "/libcuda.so"  # libcuda.so.1 as the loader maps it
NOT_INITIALIZED = 3  # CUDA_ERROR_NOT_INITIALIZED
METHOD = "VLLM_WORKER_MULTIPROC_METHOD"  # vLLM's default is fork
REMEDY = f"{METHOD}=spawn"
BEFORE_TESTS = "before the first test (at import or collection)"
NOTE = "cuda-fork: "  # a failed start's note begins so (harness.failures' pattern)


def mapped_driver(maps: Path = MAPS) -> str | None:
    """The path of the CUDA driver library mapped into this process; None when none is (no CUDA call yet)."""
    try:
        text = maps.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and DRIVER in fields[5]:
            return fields[5].strip()
    return None


def _load(path: str):
    """The already mapped library (RTLD_NOLOAD: never a new load, whose constructors could run)."""
    return ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)


def driver_initialized(maps: Path = MAPS, load: Callable[[str], object] = _load) -> bool:
    """True once this process called ``cuInit``; False where the driver is not mapped, cannot be opened, or
    answers that it was never initialized (as it may in a child forked after ``cuInit``: ``WATCH``, which
    the child inherits, keeps its parent's reading)."""
    path = mapped_driver(maps)
    if path is None:
        return False
    try:
        library = load(path)
        count = ctypes.c_int(0)
        answer = library.cuDeviceGetCount(ctypes.byref(count))  # type: ignore[attr-defined]
    except (OSError, AttributeError):
        return False
    return answer != NOT_INITIALIZED


@dataclass
class Watch:
    """When the driver was first seen initialized, in the test process's terms: probed as each test
    begins (it then happened during or after the test before) and as an engine starts."""

    probe: Callable[[], bool] = driver_initialized
    since: str | None = None  # "after test X", "in test X" or BEFORE_TESTS; None while not initialized
    last: str | None = None  # the test that began last

    def test_begins(self, nodeid: str) -> None:
        if self.since is None and self.probe():
            self.since = f"after test {self.last}" if self.last else BEFORE_TESTS
        self.last = nodeid

    def initialized(self) -> bool:
        if self.since is None and self.probe():
            self.since = f"in test {self.last}" if self.last else BEFORE_TESTS
        return self.since is not None


WATCH = Watch()  # the process's driver is one fact; a forked child inherits what its parent saw


def torch_knows() -> bool:
    """torch's flag, vLLM's own reason to spawn (read only where torch is imported; False in a forked
    child, which torch calls a bad fork)."""
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except AttributeError:  # a torch without CUDA support, or a stand-in
        return False


def spawned_message(since: str) -> str:
    return (
        f"the CUDA driver was initialized in the test process {since} (torch's flag unset, so vLLM would "
        f"fork its engine process, which then fails CUDA initialization): the harness set {REMEDY}"
    )


def failed_message(since: str) -> str:
    return (
        f"the CUDA driver was initialized in the test process {since}, before vLLM forked its "
        f"engine process ({METHOD}=fork), so the engine failed CUDA initialization; set {REMEDY}, or keep "
        "the test process off CUDA (torch.cuda.is_available() initializes the driver)"
    )


@contextlib.contextmanager
def engine_start(cuda: bool, report: Callable[[str], object], watch: Watch = WATCH) -> Iterator[None]:
    """Around one vLLM engine start on CUDA. Where the driver is initialized here and the start method is
    left to vLLM, set ``spawn`` as vLLM itself does when torch's flag says so (``report`` says it); where
    the suite asked for ``fork``, keep it and name a failed start's cause on its error (a note, which the
    failure class reads) and in ``report``."""
    forked = cuda and os.environ.get(METHOD, "fork") == "fork" and not torch_knows() and watch.initialized()
    if forked and METHOD not in os.environ:
        os.environ[METHOD] = "spawn"
        report(spawned_message(str(watch.since)))
        forked = False
    try:
        yield
    except Exception as error:
        if forked and os.environ.get(METHOD, "fork") == "fork":  # vLLM did not switch to spawn itself
            message = failed_message(str(watch.since))
            error.add_note(f"{NOTE}{message}")  # the failure class's pattern reads the mark
            report(message)
        raise
