"""harness.platform.cuda_fork: the driver's state read without initializing it (a fake mapped driver: no GPU
here), when it was first initialized in test terms, and a vLLM engine start after it (a stub ``vllm`` whose
engine fails as a forked EngineCore does on CUDA, on the fake NVIDIA platform): spawn set where vLLM
decides, the failure named where the suite asked for fork."""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
import textwrap
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness import failures, ledger
from harness.platform import cuda_fork
from tests.conftest import ROOT
from tests.unit.test_patches import stub

pytest_plugins = ["pytester"]

MAPPED = (
    "7f0000000000-7f0000001000 r-xp 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "7f0000100000-7f0000200000 r-xp 00000000 08:01 5678 /usr/local/nvidia/lib64/libcuda.so.580.159.04\n"
    "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n"
)


class Driver:
    """libcuda's ``cuDeviceGetCount``: CUDA_ERROR_NOT_INITIALIZED until cuInit ran, then 0 (success)."""

    def __init__(self, initialized: bool):
        self.initialized = initialized
        self.opened: list[str] = []

    def load(self, path: str) -> Driver:
        self.opened.append(path)
        return self

    def cuDeviceGetCount(self, count) -> int:  # noqa: N802 (the driver's name)
        if not self.initialized:
            return cuda_fork.NOT_INITIALIZED
        ctypes.cast(count, ctypes.POINTER(ctypes.c_int))[0] = 1
        return 0


def test_the_mapped_driver_is_found_by_its_path_in_the_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(MAPPED)
    assert cuda_fork.mapped_driver(maps) == "/usr/local/nvidia/lib64/libcuda.so.580.159.04"
    maps.write_text(MAPPED.replace("libcuda", "libcudart"))
    assert cuda_fork.mapped_driver(maps) is None
    assert cuda_fork.mapped_driver(tmp_path / "absent") is None


@pytest.mark.parametrize("initialized", [False, True])
def test_the_driver_answers_whether_cuinit_ran(tmp_path, initialized):
    maps = tmp_path / "maps"
    maps.write_text(MAPPED)
    driver = Driver(initialized)
    assert cuda_fork.driver_initialized(maps, driver.load) is initialized
    assert driver.opened == ["/usr/local/nvidia/lib64/libcuda.so.580.159.04"]


def test_an_unmapped_driver_is_never_opened(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(MAPPED.replace("libcuda", "libfoo"))
    driver = Driver(True)
    assert cuda_fork.driver_initialized(maps, driver.load) is False
    assert driver.opened == []


def test_a_driver_that_cannot_be_opened_is_not_initialized(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(MAPPED)

    def refuse(path: str):
        raise OSError(f"{path}: not loaded")

    assert cuda_fork.driver_initialized(maps, refuse) is False


def test_this_process_has_no_cuda_driver():
    """The CPU machine: nothing maps libcuda, so the real probe reads False (and loads nothing)."""
    assert cuda_fork.mapped_driver() is None
    assert cuda_fork.driver_initialized() is False


@given(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=8, unique=True), st.data())
def test_the_first_test_after_which_the_driver_was_initialized_is_named(tests, data):
    """The probe turns true while test k runs (k = -1: before any test): test k+1's start names test k,
    and the name never changes afterwards."""
    k = data.draw(st.integers(-1, len(tests) - 1))
    state = {"on": k == -1}
    watch = cuda_fork.Watch(probe=lambda: state["on"])
    for i, test in enumerate(tests):
        watch.test_begins(test)
        if i == k:
            state["on"] = True
    expected = None if k in (-1, len(tests) - 1) else f"after test {tests[k]}"
    expected = cuda_fork.BEFORE_TESTS if k == -1 else expected
    assert watch.since == expected
    assert watch.initialized()
    if k == len(tests) - 1:  # first seen at an engine start in the last test
        assert watch.since == f"in test {tests[k]}"


def test_a_driver_never_initialized_names_nothing():
    watch = cuda_fork.Watch(probe=lambda: False)
    for test in ("a", "b"):
        watch.test_begins(test)
    assert not watch.initialized() and watch.since is None


def start(
    watch: cuda_fork.Watch, cuda: bool = True, fails: bool = False
) -> tuple[list[str], Exception | None]:
    said: list[str] = []
    try:
        with cuda_fork.engine_start(cuda, said.append, watch):
            if fails:
                raise RuntimeError("Engine core initialization failed. See root cause above.")
    except RuntimeError as error:
        return said, error
    return said, None


def initialized_after_a() -> cuda_fork.Watch:
    watch = cuda_fork.Watch(probe=lambda: True)
    watch.last = "t.py::a"
    watch.test_begins("t.py::b")
    return watch


def test_spawn_is_set_where_the_method_is_left_to_vllm(monkeypatch):
    monkeypatch.delenv(cuda_fork.METHOD, raising=False)
    said, error = start(initialized_after_a())
    assert os.environ[cuda_fork.METHOD] == "spawn" and error is None
    assert said == [cuda_fork.spawned_message("after test t.py::a")]
    assert "the harness set VLLM_WORKER_MULTIPROC_METHOD=spawn" in said[0]


def test_a_start_the_suite_forked_is_named_with_the_test_and_the_remedy(monkeypatch):
    monkeypatch.setenv(cuda_fork.METHOD, "fork")
    said, error = start(initialized_after_a(), fails=True)
    assert os.environ[cuda_fork.METHOD] == "fork"  # the suite's choice kept
    assert error is not None and error.__notes__ == [cuda_fork.NOTE + said[0]]
    [message] = said
    assert "initialized in the test process after test t.py::a" in message
    assert "VLLM_WORKER_MULTIPROC_METHOD=spawn" in message
    text = "\n".join([f"RuntimeError: {error}", *error.__notes__])  # what pytest and the classes read
    evidence = failures.Evidence(text=text, exceptions=failures.exception_names(error))
    assert failures.classify(evidence) == "cuda-fork"


@pytest.mark.parametrize(
    ("method", "cuda", "initialized"),
    [(None, True, False), ("fork", True, False), (None, False, True), ("spawn", True, True)],
)
def test_nothing_is_set_or_named_where_a_fork_is_safe(monkeypatch, method, cuda, initialized):
    """A driver not initialized, a platform other than CUDA, or spawn already: the start is left alone."""
    if method is None:
        monkeypatch.delenv(cuda_fork.METHOD, raising=False)
    else:
        monkeypatch.setenv(cuda_fork.METHOD, method)
    said, error = start(cuda_fork.Watch(probe=lambda: initialized), cuda=cuda, fails=True)
    assert said == [] and error is not None and not getattr(error, "__notes__", None)
    assert os.environ.get(cuda_fork.METHOD) == method


def test_where_torch_made_the_context_vllm_spawns_itself_and_the_harness_stays_out(monkeypatch):
    """torch.cuda.is_initialized() True: vLLM's own check switches to spawn; nothing set, nothing said."""
    monkeypatch.delenv(cuda_fork.METHOD, raising=False)
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: True))
    monkeypatch.setitem(sys.modules, "torch", torch)
    said, error = start(initialized_after_a())
    assert said == [] and error is None and cuda_fork.METHOD not in os.environ
    torch.cuda.is_initialized = lambda: False  # a forked child's torch: a bad fork, the flag reads False
    said, error = start(initialized_after_a())
    assert len(said) == 1 and os.environ[cuda_fork.METHOD] == "spawn"


# the stub engine fails as a forked EngineCore does once the test process initialized the driver
FORKED_ENGINE_FAILS = """if __import__("os").environ.get("VLLM_WORKER_MULTIPROC_METHOD", "fork") == "fork":
            raise RuntimeError("Engine core initialization failed. See root cause above.")
        self.llm_engine = LLMEngine()"""
SUITE = """
    from harness.platform import cuda_fork


    def test_before():
        pass


    def test_reference_on_the_cpu():
        cuda_fork.WATCH.probe = lambda: True  # the fake driver: torch.cuda.is_available() ran cuInit


    def test_engine():
        from vllm import LLM

        LLM("org/model", gpu_memory_utilization=0.3).llm_engine.engine_core.shutdown()
    """


@pytest.fixture
def run_on_cuda(pytester, monkeypatch, fake_gpus):
    """The suite over the stub engine on one fake NVIDIA GPU; pytest's result and the ledger."""
    from tests.fakes import gpu

    fake_gpus([gpu(0)])
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(stub(pytester.path, engine=FORKED_ENGINE_FAILS)), str(ROOT)])
    )
    monkeypatch.setenv("HARNESS_PLATFORM", "cuda")

    def run():
        pytester.makepyfile(test_suite=textwrap.dedent(SUITE))
        directory = pytester.path / "ledger"
        shutil.rmtree(directory, ignore_errors=True)
        result = pytester.runpytest_subprocess(
            "--harness-ledger-dir", str(directory), "-p", "no:cacheprovider"
        )
        return result, ledger.read(directory)

    return run


def findings(merged) -> list[dict]:
    return [f for f in merged.findings if f["type"] == "cuda-fork"]


def test_a_suite_that_forks_after_cuda_init_fails_named_cuda_fork(run_on_cuda, monkeypatch):
    monkeypatch.setenv(cuda_fork.METHOD, "fork")
    result, merged = run_on_cuda()
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["*cuda-fork: the CUDA driver was initialized in the test process after test*"]
    )
    [finding] = findings(merged)
    assert finding["test"] == "test_suite.py::test_engine"
    assert "after test test_suite.py::test_reference_on_the_cpu" in finding["message"]
    [failed] = [t for t in merged.tests if t["outcome"] == "failed"]
    assert failed["failure_class"] == "cuda-fork"


def test_the_harness_spawns_where_vllm_would_have_forked(run_on_cuda, monkeypatch):
    monkeypatch.delenv(cuda_fork.METHOD, raising=False)
    result, merged = run_on_cuda()
    result.assert_outcomes(passed=3)
    [finding] = findings(merged)
    assert finding["message"] == cuda_fork.spawned_message(
        "after test test_suite.py::test_reference_on_the_cpu"
    )
