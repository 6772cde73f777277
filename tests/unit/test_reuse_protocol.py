"""One parking protocol (issue 51): vLLM engines and HF models are handles (``reuse.Handle``) of one pool,
parked through one ``Pool.park(handle)``, handed on through one ``take``, refused and recorded by one writer,
given way by one ``make_room``, closed by one plugin. Real tiny HF models on the CPU; the engine handle is
the adapter's own (``vllm.parking.Engine``) over a closed engine its close already refused, so no vLLM
engine starts here (test_reuse_vllm.py starts real ones)."""

from __future__ import annotations

import importlib.util

import pytest

from harness import ledger
from harness.config.settings import load_settings
from harness.ledger.writer import LedgerWriter
from harness.platform.host import HostPlatform
from harness.tracking import context
from harness.tracking.handles import Parked, Terms
from harness.tracking.hf import parking as parking_hf
from harness.tracking.policies import POLICIES
from harness.tracking.reuse import Pool, running
from harness.tracking.vllm import llms, parking

pytest_plugins = ["pytester"]
needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="needs transformers"
)


class _Run:
    """What the pool reads of a recorded start: its id, model, declared share and startup seconds."""

    def __init__(self, id_: str, fraction: float | None):
        self.id, self.model, self.startup_s = id_, "tiny", 2.0
        self.need = type("Need", (), {"fraction": fraction})()


@pytest.fixture(scope="module")
def tiny():
    """Builds a tiny GPT-2 (built here, outside any pytester test: its imports stay in sys.modules)."""
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("needs transformers")
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    def build():
        torch.manual_seed(0)
        return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=16))

    return build


@pytest.fixture
def pool(tmp_path):
    """One pool of both kinds, in a context of its own that records into ``tmp_path``."""
    mine = context.Context(HostPlatform(), load_settings("cpu", None, env={}))
    mine.owner.enter_test("test_x.py::test_one", "test_x.py")
    mine.writer = LedgerWriter(tmp_path, worker="main")
    mine.pool = Pool(mine.writer, capacity=1, kinds=("vllm", "hf"))
    replaced = context.use(mine)
    yield mine.pool
    mine.pool.close()
    context.use(replaced)


def _engine(stopped: list, refused: str | None = None, fraction: float = 0.5) -> parking.Engine:
    """The adapter's handle of a closed engine (a stand-in object: nothing here looks inside it)."""
    began = llms.Started(_Run("main-9", fraction), "{}", "E")
    return parking.Engine(object(), began, lambda: stopped.append("E"), refused)


def test_both_kinds_park_take_and_refuse_through_one_pool_and_one_writer(pool, tiny, tmp_path):
    model = tiny()
    assert pool.park(parking_hf.Model.loaded("M", model, _Run("main-1", None)), running())
    del model  # its test is done with it
    handed = pool.take("M", running())
    assert (
        handed is not None and pool.take("M", running()) is None
    )  # still in use: not handed on, not refused
    del handed
    handed = pool.take("M", running())  # an open handle stays parked: handed on again while unchanged
    assert handed is not None
    handed.lm_head.weight.data.add_(1.0)  # a test changes it in place
    del handed
    assert pool.take("M", running()) is None and not pool.warm  # refused by the pool, dropped
    stopped: list[str] = []
    closing = _engine(
        stopped, refused="it counts stats (disable_log_stats=False): its counters would carry over"
    )
    assert not pool.park(closing, running())  # refused at its park: its owner stops it
    read = ledger.read(tmp_path)
    assert [(r["kind"], r["fingerprint"], r["runner"]) for r in read.reuses] == [("hf", "M", "main-1")] * 2
    assert all(r["handoff_s"] >= 0 for r in read.reuses)  # one writer: the same fields for either kind
    assert [(r["runner"], r["fingerprint"], r["reason"].split(" (")[0]) for r in read.refusals] == [
        ("main-1", "M", "a test changed it"),
        ("main-9", "E", "it counts stats"),
    ]


def test_engines_give_way_by_place_and_share_and_models_stay_for_their_check(pool, tiny):
    """One make_room: an HF model takes no engine place and stays where a start's share fits (the CPU);
    a fresh_engine test and a failed one shut engines down and leave the model to its next check."""
    model = tiny()
    assert pool.park(parking_hf.Model.loaded("M", model, _Run("main-1", None)), running())
    stopped: list[str] = []
    pool.warm["E"] = Parked(_engine(stopped), POLICIES["vllm"])  # a warm engine, and one held for a replay
    running().held["E"] = Parked(_engine(stopped), POLICIES["vllm"])
    pool.make_room(0.5)  # a start in a pool of one engine place: both engines give way, the model stays
    assert stopped == ["E", "E"] and set(pool.warm) == {"M"} and not running().held
    pool.fresh_test(Terms("test_x.py::test_fresh", "fresh"))
    pool.failed(running())
    assert set(pool.warm) == {"M"}
    previous, context.current().test = running(), Terms("test_x.py::test_two")
    pool.begin(running(), previous)
    del model
    assert pool.take("M", running()) is not None


SUITE = """
import pytest
from transformers import GPT2LMHeadModel

from harness.tracking.context import current

FOLDER = {folder!r}
TRIES = []


def test_load():
    pool = current().pool
    assert pool.keeps("hf") and pool.keeps("vllm") and not hasattr(current(), "shelf")
    GPT2LMHeadModel.from_pretrained(FOLDER)


@pytest.mark.fresh_engine
def test_fresh_engine_marker_loads_its_own():
    GPT2LMHeadModel.from_pretrained(FOLDER)


def test_fails_once_on_a_handed_on_model():
    GPT2LMHeadModel.from_pretrained(FOLDER)
    TRIES.append(1)
    assert len(TRIES) > 1, "fails on its first call in the process"
"""


@needs_transformers
def test_one_plugin_drives_hf_models_by_the_tests_mode_and_replays_on_the_same_model(
    pytester, monkeypatch, tiny
):
    """Engine reuse and HF reuse on: one pool, one plugin. A fresh_engine test gets no parked model (and
    leaves it parked); a test that fails on a handed-on model is replayed on that very model (still parked:
    ``Pool.replayable``), passes there, so its failure is its own and stays a failure."""
    tiny().save_pretrained(pytester.path / "checkpoint")
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    monkeypatch.setenv("HARNESS_REUSE_HF", "1")
    pytester.makepyfile(test_protocol=SUITE.format(folder=str(pytester.path / "checkpoint")))
    directory = pytester.path / "ledger"
    result = pytester.runpytest_subprocess(
        "--harness", "--harness-reuse", "--harness-ledger-dir", str(directory), "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=2, failed=1)
    read = ledger.read(directory)
    names = [r["test"].split("::")[1] for r in read.records]
    assert names == ["test_load", "test_fresh_engine_marker_loads_its_own"]
    assert [r["test"].split("::")[1] for r in read.reuses] == ["test_fails_once_on_a_handed_on_model"] * 2
    [rerun] = read.reruns
    assert rerun["why"].startswith("the test failed on a handed-on engine: it runs again on that engine")
    assert rerun["result"] == "failed"


@needs_transformers
def test_hf_reuse_alone_keeps_no_test_modes(pytester, monkeypatch, tiny):
    """HF reuse without engine reuse: the one pool keeps HF models only, and the plugin sets no per-test
    mode (a fresh_engine test is handed the parked model, as before one pool)."""
    tiny().save_pretrained(pytester.path / "checkpoint")
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    monkeypatch.setenv("HARNESS_REUSE_HF", "1")
    suite = SUITE.replace('and pool.keeps("vllm")', 'and not pool.keeps("vllm")')
    pytester.makepyfile(test_protocol=suite.format(folder=str(pytester.path / "checkpoint")))
    directory = pytester.path / "ledger"
    result = pytester.runpytest_subprocess(
        "--harness", "--harness-ledger-dir", str(directory), "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=2, failed=1)
    read = ledger.read(directory)
    assert len(read.records) == 1 and len(read.reuses) == 2 and not read.reruns
