"""A vLLM start recorded as cold or warm from its compile caches (harness.tracking.compile_cache), and the
summary's two medians."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from harness import ledger
from harness.report.store import load
from harness.report.summary import render
from harness.tracking.compile_cache import Snapshot, compiles, inductor_dir, judge, vllm_root
from tests.unit.report_runs import Run

pytest_plugins = ["pytester"]

NAMES = st.frozensets(
    st.sampled_from(["torch_aot_compile", "torch_aot_compile/a1", "torch_aot_compile/b2", "c3"])
)


@settings(max_examples=500)
@given(NAMES, NAMES, st.booleans(), st.booleans(), st.booleans())
def test_cold_exactly_when_the_start_made_an_entry_or_found_none(before, after, ind0, ind1, compiled):
    verdict = judge(Snapshot(before, ind0), Snapshot(after, ind1), compiled)
    if not compiled:
        assert verdict is None
    elif after - before:
        assert verdict == "cold"  # it compiled a configuration the cache did not hold
    elif before:
        assert (
            verdict == "warm"
        )  # its configuration's folder was there (inductor's artifacts inside), none added
    else:
        assert verdict == ("cold" if ind1 and not ind0 else None)


def test_an_eager_engine_compiles_nothing():
    assert not compiles({"enforce_eager": True})
    assert not compiles({"compilation_config": 0}) and not compiles({"compilation_config": {"level": 0}})
    assert compiles({"model": "m"}) and compiles({"compilation_config": {"level": 3}})


def test_where_the_caches_are(tmp_path):
    env = {"VLLM_CACHE_ROOT": str(tmp_path / "v"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "i")}
    assert (vllm_root(env), inductor_dir(env)) == (tmp_path / "v", tmp_path / "i")
    assert vllm_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "vllm"
    assert inductor_dir({}).name.startswith("torchinductor_")
    assert Snapshot.take(env) == Snapshot(frozenset(), False)  # missing folders: nothing, no error
    (tmp_path / "v" / "torch_compile_cache" / "torch_aot_compile" / "h1" / "rank_0_0").mkdir(parents=True)
    (tmp_path / "i").mkdir()
    (tmp_path / "i" / "fxgraph").mkdir()
    assert Snapshot.take(env) == Snapshot(frozenset({"torch_aot_compile", "torch_aot_compile/h1"}), True)


STARTS = """
import os
from pathlib import Path

from harness.tracking.starts import starting

AOT = Path(os.environ["VLLM_CACHE_ROOT"]) / "torch_compile_cache" / "torch_aot_compile"


def _start(model, eager=False):
    with starting("vllm", model, {"model": model, "enforce_eager": eager}) as run:
        (AOT / model).mkdir(parents=True, exist_ok=True)  # what the engine's compile saves
        Path(os.environ["TORCHINDUCTOR_CACHE_DIR"], model).mkdir(parents=True, exist_ok=True)
    run.stop()


def test_first():
    _start("m1")


def test_again():
    _start("m1")


def test_eager():
    _start("m2", eager=True)


def test_hf():
    with starting("hf", "m3", {"model": "m3"}) as run:
        pass
    run.stop()
"""


def test_each_vllm_start_is_recorded_cold_then_warm(pytester, monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "vllm"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    pytester.makepyfile(test_x=STARTS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--harness", "--harness-ledger-dir", "led"
    )
    assert result.ret == 0
    read = ledger.read(pytester.path / "led")
    assert not read.findings
    by_test = {r["test"].rpartition("::")[2]: r for r in read.records}
    assert [by_test[name].get("compile") for name in ("test_first", "test_again", "test_eager")] == [
        "cold",
        "warm",
        None,
    ]
    assert "compile" not in by_test["test_hf"]  # not a vLLM start


def _record(worker, test: str, start: float, startup_s: float, state: str | None) -> None:
    """A vLLM start whose ``runner-started`` says how its compile caches were."""
    worker.count += 1
    runner = f"{worker.name}-{worker.count}"
    worker.write(
        "runner-start", start, id=runner, kind="vllm", model="m", fingerprint="f", config={"model": "m"},
        test=test, file="t.py", fixture=None, scope="function", worker=worker.name, phase=worker.phase,
        devices=worker.devices, need_bytes=None, mem_before=None,
    )  # fmt: skip
    worker.write("runner-started", start + startup_s, id=runner, startup_s=startup_s, compile=state)
    worker.write("runner-stopped", start + startup_s + 1, id=runner, teardown_s=0.5)


def test_the_summary_shows_both_medians(tmp_path):
    run = Run(tmp_path).phase("default", 0, 300)
    worker = run.worker("default")
    _record(worker, "t.py::a", 1, 53.7, "cold")
    _record(worker, "t.py::b", 60, 49.0, "cold")
    _record(worker, "t.py::c", 120, 22.9, "warm")
    _record(worker, "t.py::d", 150, 5.0, None)
    report = run.finalize()
    assert [r.get("compile") for r in report["records"]] == ["cold", "cold", "warm", None]
    assert "vLLM starts by compile cache: cold 51.4 s median of 2; warm 22.9 s median of 1." in render(report)
    (tmp_path / "r.json").write_text(json.dumps(report))
    assert [r.get("compile") for r in load(tmp_path / "r.json")["records"]] == ["cold", "cold", "warm", None]
    old = Run(tmp_path / "old").phase("default", 0, 10)
    old.worker("default").runner("t.py::a", 1, 5, 7)
    assert "compile cache" not in render(old.finalize())  # no start judged: no line
