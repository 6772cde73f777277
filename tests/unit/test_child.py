"""References computed in a child process keep the test process free of CUDA, and are still recorded."""

from __future__ import annotations

import os

import pytest

from harness.ledger.reader import read
from harness.ledger.writer import LedgerWriter
from harness.tracking import context, starts
from harness.tracking.child import in_child
from tests.fakes import gpu

GIB = 2**30


def load_reference(model: str) -> int:
    """What a suite's HF reference does: a recorded load and stop; returns the pid it ran in."""
    with starts.starting("hf", model, {"model": model}) as run:
        pass
    if run is not None:  # None where nothing records
        run.stop()
    return os.getpid()


def fails(message: str) -> None:
    raise ValueError(message)


@pytest.fixture
def recording(fake_gpus, tmp_path):
    """A worker recording into ``tmp_path`` while a session fixture of a test is set up."""
    fake_gpus([gpu(0, total=80 * GIB, used=GIB)])
    here = context.build(None)
    here.owner.worker = "gw3"
    here.owner.enter_test("t.py::test_embeddings", "t.py")
    here.owner.enter_fixture("reference", "session")
    here.writer = LedgerWriter(tmp_path / "ledger", worker="gw3")
    replaced = context.use(here)
    yield tmp_path / "ledger"
    context.use(replaced)


def test_on_a_gpu_the_reference_runs_in_a_child_recorded_as_the_callers(recording):
    assert context.current().platform.name == "cuda"
    assert in_child(load_reference, "minilm") != os.getpid()
    (record,) = read(recording).records
    assert (record["test"], record["fixture"], record["scope"]) == (
        "t.py::test_embeddings",
        "reference",
        "session",
    )
    assert record["worker"] == "gw3" and record["outcome"] == "started"


def test_the_childs_exception_is_raised_here(recording):
    with pytest.raises(ValueError, match="no such model"):
        in_child(fails, "no such model")


def test_on_the_cpu_it_runs_here(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    replaced = context.use(context.build(None))
    try:
        assert in_child(load_reference, "minilm") == os.getpid()
    finally:
        context.use(replaced)
