"""Shared fixture: a fake GPU machine for the platform layer (see ``tests.fakes``)."""

from __future__ import annotations

import fcntl
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings

from tests import fakes

# property tests (hypothesis): no per-example deadline (this 2-core machine varies ±30 %, and a slow example
# is not a wrong one), no example database written into the checkout
settings.register_profile("harness", deadline=None, database=None)
settings.load_profile("harness")

ROOT = Path(__file__).resolve().parents[1]
# The pytest sessions these tests start (pytester, harness run) live in temporary folders without a
# [tool.harness] table: they ask for the harness as harness run does. test_inert clears it to see the
# plugin stay inert.
os.environ.setdefault("HARNESS", "1")
# what decides the platform and its masks: cleared so the machine running the tests does not leak in
PLATFORM_VARIABLES = (
    "HARNESS_PLATFORM",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK",
)
# vLLM's CPU engines the tests start (~21 stops): when one stops, its worker lingers until vLLM's grace ends
# (5 s) while the EngineCore spins; at 1 s vLLM ends them sooner by the same path (SIGTERM, then SIGKILL),
# which the tests of stops still meet: a start and stop 32.1 -> 29.1 CPU-s, 31.1 -> 27.9 s (engine_stop.py)
os.environ.setdefault("VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", "1")
_MODULES = {
    "nvidia": ("HARNESS_NVML_MODULE", "tests.fakes.pynvml"),
    "amd": ("HARNESS_AMDSMI_MODULE", "tests.fakes.amdsmi"),
    "intel": ("HARNESS_XPU_MODULE", "tests.fakes.torch_xpu"),
}


# The pytest sessions the tests start (pytester's, harness run's phases, a plain pytest) load neither
# hypothesis's plugin nor anyio's: none of them needs one (a @given test runs without the plugin), and the
# two were 45 % of a trivial session's start-up CPU (0.50 -> 0.28 s), in hundreds of sessions
NESTED_ADDOPTS = "-p no:hypothesispytest -p no:anyio"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """This session's temporary folders out of pytest's numbered ones. Many tests here run pytest in a
    subprocess; each such run makes a numbered folder and deletes all but the newest three, so under xdist
    a long session's own folder (and a running test's ``tmp_path``) went with them. xdist's workers get
    theirs from the controller's."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        # an xdist worker, or a session without workers: what it starts inherits the variable; the
        # controller keeps it unset, so its workers load both plugins
        os.environ["PYTEST_ADDOPTS"] = f"{os.environ.get('PYTEST_ADDOPTS', '')} {NESTED_ADDOPTS}".strip()
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        # a folder of this session's alone: pytest empties a given basetemp, so a shared one would be
        # emptied under a session running beside it
        config.option.basetemp = tempfile.mkdtemp(prefix="harness-tests-")


def _boots(item: pytest.Item) -> int:
    """The vLLM processes an ``engines`` test boots (``engines(n)``): each imports vLLM and torch, ~12 s of
    CPU, most of such a test's cost. 0: it reads a run a test of its module starts."""
    marker = item.get_closest_marker("engines")
    return marker.args[0] if marker is not None and marker.args else 0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under xdist's worksteal, the tests that start real engines (``engines``: minutes of CPU each) open
    the workers' first chunks, so they run from the start beside the quick tests instead of last and one
    after another (worksteal hands out contiguous chunks: ``n // W``, then the rest's share). The most
    booting first, each to the worker with the fewest boots so far (a test that reads its module's run
    follows that run's test), so no worker is left with two long ones while another has none.
    Every worker computes the same order; alone (no xdist) the order is pytest's."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 2:
        return
    slow = [item for item in items if item.get_closest_marker("engines")]
    quick = iter([item for item in items if not item.get_closest_marker("engines")])
    chunks: list[list[pytest.Item]] = [[] for _ in range(workers)]
    boots = [0] * workers
    for item in sorted(slow, key=_boots, reverse=True):  # stable: collection order among equals
        fewest = boots.index(min(boots))
        module = [w for w, chunk in enumerate(chunks) if any(i.module == item.module for i in chunk)]
        worker = module[0] if module and not _boots(item) else fewest
        chunks[worker].append(item)
        boots[worker] += _boots(item)
    sizes = _sizes(len(items), workers)
    ordered = []
    for mine, size in zip(chunks, sizes, strict=True):
        ordered += [*mine, *itertools.islice(quick, max(size - len(mine), 0))]
    ordered += quick
    # where a worker's engines outnumber its chunk, or the quick tests run out, the chunks' bounds move:
    # each chunk as worksteal cuts it still opens with the engine tests it got
    starts = list(itertools.accumulate(sizes, initial=0))
    items[:] = [i for a, b in itertools.pairwise(starts) for i in _engines_first(ordered[a:b])]


def _sizes(items: int, workers: int) -> list[int]:
    """The sizes of the contiguous chunks worksteal hands the workers: ``n // W``, then the rest's share."""
    sizes = []
    for worker in range(workers):
        sizes.append((items - sum(sizes)) // (workers - worker))
    return sizes


def _engines_first(chunk: list[pytest.Item]) -> list[pytest.Item]:
    return sorted(chunk, key=lambda item: item.get_closest_marker("engines") is None)  # stable


@pytest.fixture
def fake_gpus(monkeypatch, tmp_path):
    """``fake_gpus(devices, vendor="nvidia"|"amd"|"intel")`` describes the machine; returns its file.

    Only the chosen vendor's fake is selected; the other library is pointed at a module that does not
    exist, so detection is the same on any machine. The environment is set for subprocesses too.
    """
    path = tmp_path / "fake_gpus.json"
    for variable in PLATFORM_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))

    def describe(devices: list[dict], vendor: str = "nvidia") -> Path:
        fakes.write(path, devices)
        monkeypatch.setenv("FAKE_GPUS_FILE", str(path))
        for name, (variable, module) in _MODULES.items():
            monkeypatch.setenv(variable, module if name == vendor else "tests.fakes.absent")
        return path

    return describe


@pytest.fixture(scope="session")
def built_once(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, Callable[[Path], None]], Path]:
    """``built_once(name, build)``: a folder ``build`` fills once per test session, by whichever xdist worker
    asks first while the others wait; a module-scoped fixture runs again in every worker that worksteal
    hands a part of its module to (a wheel and its venv, a harness run). The folder is shared: copy it
    before changing it."""
    base = tmp_path_factory.getbasetemp()
    session = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base

    def built(name: str, build: Callable[[Path], None]) -> Path:
        shared = session / f"built-{name}"
        with open(f"{shared}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not (shared / ".built").exists():
                shutil.rmtree(shared, ignore_errors=True)
                shared.mkdir()
                build(shared)
                (shared / ".built").touch()
        return shared

    return built


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester, whose sessions leave out the plugins none of them needs (``NESTED_ADDOPTS``; pytester
    clears ``PYTEST_ADDOPTS`` as it starts)."""
    monkeypatch.setenv("PYTEST_ADDOPTS", NESTED_ADDOPTS)
    return pytester
