"""The ledger file format: durable appends, merge of many workers and phases, torn lines, derived findings."""

from __future__ import annotations

import json

from harness import ledger

pytest_plugins = ["pytester"]


def _start(writer, model="m", **extra):
    run_id = writer.new_id()
    writer.write(
        "runner-start", id=run_id, kind="vllm", model=model, fingerprint="abc", test="t.py::x", **extra
    )
    return run_id


def test_events_are_json_lines_per_worker(tmp_path):
    writer = ledger.LedgerWriter(tmp_path, worker="gw1")
    run_id = _start(writer)
    writer.write("runner-started", id=run_id, startup_s=1.5, mem_after_start={"GPU-0": 7})
    lines = (tmp_path / "gw1.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["runner-start", "runner-started"]
    assert run_id == "gw1-1"
    assert all(isinstance(json.loads(line)["t"], float) for line in lines)


def test_worker_comes_from_the_session_not_an_inherited_variable(pytester, monkeypatch):
    """A pytest started from inside an xdist worker inherits PYTEST_XDIST_WORKER but is no worker."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--harness", "--harness-ledger-dir", "led"
    )
    assert result.ret == 0
    assert sorted(p.name for p in (pytester.path / "led").iterdir()) == ["main.jsonl"]
    assert [t["worker"] for t in ledger.read(pytester.path / "led").tests] == ["main"]


def test_records_merge_outcomes_across_workers_and_phase_directories(tmp_path):
    first = ledger.LedgerWriter(tmp_path / "pooling", worker="gw0")
    ok = _start(first, model="a")
    first.write("runner-started", id=ok, startup_s=2.0, mem_after_start={"GPU-0": 10})
    first.write("runner-stopped", id=ok, teardown_s=0.5, mem_after_stop={"GPU-0": 1})
    failed = _start(first, model="b")
    first.write("runner-failed", id=failed, startup_s=0.1, error="ValueError: no", blocked=False, holders=[])
    second = ledger.LedgerWriter(tmp_path / "generation", worker="gw0")  # same worker name, other phase
    blocked = _start(second, model="c")
    second.write(
        "runner-failed", id=blocked, startup_s=3.0, error="RunnerBlocked: x", blocked=True, holders=["h"]
    )
    second.write("test", nodeid="t.py::x", outcome="passed")
    second.write("worker", worker="gw0", devices=["GPU-0"], mask="0", pid=1)

    merged = ledger.read(tmp_path)
    outcomes = {r["model"]: (r["outcome"], r["holders"]) for r in merged.records}
    assert outcomes == {"a": ("started", []), "b": ("failed", []), "c": ("blocked", ["h"])}
    record = next(r for r in merged.records if r["model"] == "a")
    assert (record["startup_s"], record["teardown_s"], record["mem_after_stop"]) == (2.0, 0.5, {"GPU-0": 1})
    assert record["stop"] >= record["start"]
    assert merged.findings == []
    assert [t["nodeid"] for t in merged.tests] == ["t.py::x"]
    assert [w["devices"] for w in merged.workers] == [["GPU-0"]]


def test_start_without_stop_is_never_stopped_and_torn_line_is_skipped(tmp_path):
    writer = ledger.LedgerWriter(tmp_path, worker="gw0")
    run_id = _start(writer, model="leak")
    writer.write("runner-started", id=run_id, startup_s=1.0, mem_after_start={})
    writer.close()
    with open(tmp_path / "gw0.jsonl", "a") as file:
        file.write('{"event": "runner-stopped", "id": "gw0-1", "tear')  # killed mid-write
    merged = ledger.read(tmp_path)
    [record] = merged.records
    assert record["outcome"] == "never-stopped"
    [finding] = merged.findings
    assert (finding["type"], finding["runner"], finding["test"]) == ("never-stopped", "gw0-1", "t.py::x")


def test_a_restarted_worker_keeps_runner_ids_unique(tmp_path):
    _start(ledger.LedgerWriter(tmp_path, worker="gw0"))
    again = ledger.LedgerWriter(tmp_path, worker="gw0")
    assert _start(again) == "gw0-2"
    assert len(ledger.read(tmp_path).records) == 2


def test_reading_an_empty_or_missing_directory_gives_an_empty_ledger(tmp_path):
    assert ledger.read(tmp_path / "absent") == ledger.Ledger()


def test_a_restarted_worker_does_not_glue_its_first_event_onto_a_torn_line(tmp_path):
    first = ledger.LedgerWriter(tmp_path, worker="gw0")
    _start(first)
    first.close()
    with open(tmp_path / "gw0.jsonl", "a") as handle:
        handle.write('{"event": "test", "nodeid": "t.py::kil')  # the predecessor died mid-write
    replacement = ledger.LedgerWriter(tmp_path, worker="gw0")
    replacement.write("worker", worker="gw0", devices=["GPU-0"], mask="0", pid=2)
    merged = ledger.read(tmp_path)
    assert [w["pid"] for w in merged.workers] == [2]
    assert len(merged.records) == 1
