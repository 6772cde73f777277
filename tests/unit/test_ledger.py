"""The ledger file format: durable appends, merge of many workers and phases, torn lines, derived findings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from harness import ledger
from harness.errors import HarnessError

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
    writer.close()
    lines = (tmp_path / "gw1.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["runner-start", "runner-started"]
    assert run_id == "gw1-1"
    assert all(isinstance(json.loads(line)["t"], float) for line in lines)


@pytest.mark.parametrize(
    ("nodeid", "seconds", "following"),
    [
        ("t.py::test_x[a-b]", (0.0004, 1.23456, 0.0), "t.py::test_y"),
        ('t.py::test_q["quote\\back\tslash"]', (0.5, None, None), None),
        ("t.py::test_unicode[café-√]", (None, None, 2.0), "t.py::test_ü"),
        ("t.py::test_half_a_millisecond", (0.00049999, 0.0005, 0.0005001), "t.py::test_z"),
    ],
)
def test_the_test_line_reads_back_as_the_general_writers_own(tmp_path, nodeid, seconds, following):
    """``test`` formats the line every test writes itself; it must read back as ``write`` would give it."""
    fast = ledger.LedgerWriter(tmp_path / "fast", worker="main")
    general = ledger.LedgerWriter(tmp_path / "general", worker="main")
    before = time.time()
    fast.test(nodeid, "passed", *seconds, following)
    setup_s, call_s, teardown_s = (None if s is None else round(s, 3) for s in seconds)
    general.write(
        "test",
        nodeid=nodeid,
        outcome="passed",
        setup_s=setup_s,
        call_s=call_s,
        teardown_s=teardown_s,
        next=following,
    )
    fast.close()
    general.close()
    read = [json.loads((tmp_path / name / "main.jsonl").read_text()) for name in ("fast", "general")]
    after = time.time()
    # each line's time is when it was written (the fast line's kept to the millisecond)
    assert all(before - 0.001 <= line.pop("t") <= after + 0.001 for line in read)
    assert read[0] == read[1]
    assert list(read[0]) == list(read[1])  # "event" first, as readers that skip by it expect


def test_a_test_line_names_its_own_test_after_one_that_announced_another(tmp_path):
    """The JSON of the announced id is kept for the next line: only when that line is the announced test's."""
    writer = ledger.LedgerWriter(tmp_path, worker="main")
    announced = "t.py::test_b"
    writer.test("t.py::test_a", "passed", 0.0, 0.0, 0.0, announced)
    writer.test(announced, "passed", 0.0, 0.0, 0.0, "t.py::test_c")
    writer.test("t.py::test_d", "failed", 0.0, 0.0, 0.0, None)  # not the announced test_c
    writer.close()
    lines = [json.loads(line) for line in (tmp_path / "main.jsonl").read_text().splitlines()]
    assert [(e["nodeid"], e["next"]) for e in lines] == [
        ("t.py::test_a", "t.py::test_b"), ("t.py::test_b", "t.py::test_c"), ("t.py::test_d", None)
    ]  # fmt: skip


def test_worker_comes_from_the_session_not_an_inherited_variable(pytester, monkeypatch):
    """A pytest started from inside an xdist worker inherits PYTEST_XDIST_WORKER but is no worker."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--harness", "--harness-ledger-dir", "led"
    )
    assert result.ret == 0
    assert sorted(p.name for p in (pytester.path / "led").glob("*.jsonl")) == ["main.jsonl"]
    assert [t["worker"] for t in ledger.read(pytester.path / "led").tests] == ["main"]


def test_a_session_stopped_by_x_reports_no_crash_in_the_test_it_never_ran(pytester, monkeypatch):
    """Each test event announces pytest's next test (no test-start written for it); -x stops before it."""
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    pytester.makepyfile(
        test_x="def test_a():\n    pass\n\ndef test_b():\n    assert 0\n\ndef test_c():\n    pass\n"
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-x", "--harness", "--harness-ledger-dir", "led"
    )
    assert result.ret == 1
    lines = (pytester.path / "led" / "main.jsonl").read_text().splitlines()
    assert sum('"event": "test-start"' in line for line in lines) == 1  # test_a's only
    read = ledger.read(pytester.path / "led")
    assert [(t["nodeid"], t["outcome"]) for t in read.tests] == [
        ("test_x.py::test_a", "passed"), ("test_x.py::test_b", "failed")
    ]  # fmt: skip
    assert ledger.unfinished(pytester.path / "led") == [] and read.findings == []


LOADED = """
import sys
from pathlib import Path

def pytest_unconfigure(config):
    Path("loaded.txt").write_text("\\n".join(sorted(m for m in sys.modules if m.startswith("harness."))))
"""


def test_a_session_that_starts_no_runner_loads_only_what_it_writes_with(pytester, monkeypatch):
    """What a session that builds no runner pays for (benchmarks/plugin_overhead.py): not the reader (its
    summary is told from its own writer), the runners, the recording path or the GPU backends."""
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    pytester.makeconftest(LOADED)
    pytester.makepyfile(test_x="def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--harness", "--harness-ledger-dir", "led"
    )
    assert result.ret == 0
    loaded = set((pytester.path / "loaded.txt").read_text().split())
    assert {"harness.ledger.writer", "harness.pytest_plugin.recorder"} <= loaded
    unused = {
        "harness.ledger.reader",
        "harness.runners",
        "harness.tracking.starts",
        "harness.memory.waits",
        "harness.platform.nvidia",
        "harness.platform.amd",
        "harness.pytest_plugin.membership",
        # each module a session imports costs it pytest's assertion-rewrite import path as well (an installed
        # pytest11 distribution's modules are all marked for it): these wait for a runner or their option
        "harness.memory.admission",
        "harness.platform.allocator",
        "harness.ledger.owner",
        "harness.pytest_plugin.order",
    }
    assert loaded & unused == set()
    assert [t["outcome"] for t in ledger.read(pytester.path / "led").tests] == ["passed", "passed"]


FORKED_START = """
import os

from harness.tracking.starts import starting


def test_forks():
    pid = os.fork()
    if pid == 0:  # the child records into main.<pid>.jsonl; the parent's own writer writes no start
        with starting("hf", "child-model", {}):
            pass
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
"""


def test_the_summary_counts_a_start_only_a_forked_child_wrote(pytester, monkeypatch):
    """The summary skips reading the ledger only when this process's writer is the directory's one file."""
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    pytester.makepyfile(test_x=FORKED_START)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--harness")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*1 runner starts (hf 1)*", "*test_x.py: 1 (hf 1)*"])


FLAKY = """
import pytest

def _first(name):
    marker = __import__("pathlib").Path(name)
    first = not marker.exists()
    marker.touch()
    return first

@pytest.fixture
def breaks_once():
    yield
    assert not _first("teardown-ran")

def test_call_fails_once():
    assert not _first("call-ran")

def test_teardown_fails_once(breaks_once):
    pass
"""


def test_a_test_pytest_rerunfailures_runs_again_is_one_test_line_with_its_last_outcome(pytester, monkeypatch):
    """vLLM marks flaky tests for pytest-rerunfailures, which logs a failed try (its call, or its teardown)
    as "rerun" and runs the test again: the ledger holds the test once, as its last try ended."""
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    pytester.makepyfile(test_flaky=FLAKY)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--reruns", "1", "--harness", "--harness-ledger-dir", "led"
    )
    assert result.parseoutcomes() == {"passed": 3, "rerun": 2}  # the teardown that failed: its call passed
    read = ledger.read(pytester.path / "led")
    assert [(t["nodeid"], t["outcome"]) for t in read.tests] == [
        ("test_flaky.py::test_call_fails_once", "passed"),
        ("test_flaky.py::test_teardown_fails_once", "passed"),
    ]
    assert ledger.unfinished(pytester.path / "led") == [] and read.findings == []


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


def test_lines_that_are_not_utf8_or_lack_their_fields_are_skipped_when_a_worker_reopens_the_file(tmp_path):
    _start(ledger.LedgerWriter(tmp_path, worker="gw0"))
    with open(tmp_path / "gw0.jsonl", "ab") as handle:
        handle.write(b'{"event": "test", "nodeid": "\xff\xfe", "outcome": "passed", "t": 1}\n')
        handle.write(b'{"event": "runner-start", "t": 2}\n')  # no id, kind or model
        handle.write(b'{"event": "test", "t": "soon", "nodeid": "t.py::x", "outcome": "passed"}\n')
        handle.write(b'{"event": "collected", "t": 3, "tests": [{"not": "a string"}, "t.py::x"]}\n')
        handle.write(b"[" * 100_000 + b"\n")
    again = ledger.LedgerWriter(tmp_path, worker="gw0")  # what a replacement worker does
    assert _start(again) == "gw0-2"
    merged = ledger.read(tmp_path)
    assert [r["id"] for r in merged.records] == ["gw0-1", "gw0-2"]
    assert merged.tests == [] and list(merged.collected) == []
    assert [f["type"] for f in merged.findings] == ["bad-ledger-line"] * 3 + ["never-stopped"] * 2


def test_a_test_its_process_died_in_is_an_error_saying_how(tmp_path):
    worker = ledger.LedgerWriter(tmp_path, worker="gw0")
    worker.write("worker", worker="gw0", pid=7, timeout=2.0, timeout_method="thread")
    worker.write("test-start", nodeid="t.py::ok", file="t.py", worker="gw0", phase="p")
    worker.write("test", nodeid="t.py::ok", file="t.py", outcome="passed", worker="gw0", phase="p")
    start = worker.write("test-start", nodeid="t.py::hang", file="t.py", worker="gw0", phase="p")
    assert ledger.unfinished(tmp_path) == ["t.py::hang"]
    controller = ledger.LedgerWriter(tmp_path, worker="controller")
    controller.write("crash", test="t.py::hang", worker="gw0", how="exited with status 1")
    (crash,) = [f for f in ledger.read(tmp_path).findings if f["type"] == "crash"]
    assert ledger.unfinished(tmp_path) == []
    tests = {t["nodeid"]: t["outcome"] for t in ledger.read(tmp_path).tests}
    assert tests == {"t.py::ok": "passed", "t.py::hang": "error"}
    assert crash["message"].startswith("worker gw0 exited with status 1 while running t.py::hang")
    assert start["t"] <= crash["t"]


def test_a_ledger_file_is_never_opened_through_a_symlink(tmp_path):
    (tmp_path / "elsewhere.jsonl").write_text("")
    (tmp_path / "led").mkdir()
    (tmp_path / "led" / "gw0.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    with pytest.raises(OSError):
        ledger.LedgerWriter(tmp_path / "led", worker="gw0")
    with pytest.raises(HarnessError, match="symlink"):
        ledger.read(tmp_path / "led")


def test_nan_and_infinite_numbers_in_a_ledger_are_bad_lines_so_none_reaches_report_json(tmp_path):
    writer = ledger.LedgerWriter(tmp_path, worker="gw0")
    writer.write("test", nodeid="t.py::x", file="t.py", outcome="passed", call_s=float("nan"))
    writer.write("test", nodeid="t.py::z", file="t.py", outcome="passed", call_s=1.0)
    writer.close()
    with open(tmp_path / "gw0.jsonl", "a") as handle:
        handle.write('{"event": "test", "t": 1, "nodeid": "t.py::y", "outcome": "passed", "call_s": 1e400}\n')
    merged = ledger.read(tmp_path)
    assert [t["nodeid"] for t in merged.tests] == ["t.py::z"]
    assert [f["message"] for f in merged.findings] == [
        "gw0.jsonl line 1 skipped: a number that is NaN, not finite",
        "gw0.jsonl line 3 skipped: a number that is 1e400, not finite",
    ]


def _session(tmp_path, worker="gw0", phase="p"):
    writer = ledger.LedgerWriter(tmp_path, worker=worker)
    writer.write("worker", worker=worker, pid=7, devices=["GPU-a"], mask="0", phase=phase)
    return writer


def test_a_test_announced_by_the_one_before_it_is_the_one_a_crash_is_blamed_on(tmp_path):
    """The plugin writes no test-start for a test the previous test event announced as pytest's next."""
    writer = _session(tmp_path)
    writer.write("test-start", nodeid="t.py::a")
    writer.write("test", nodeid="t.py::a", outcome="passed", next="u.py::b")
    assert ledger.reader.running_test(tmp_path / "gw0.jsonl") == ("u.py::b", "u.py")
    assert ledger.unfinished(tmp_path) == ["u.py::b"]
    tests = {t["nodeid"]: t for t in ledger.read(tmp_path).tests}
    crashed = tests["u.py::b"]
    assert crashed["outcome"] == "error" and "while running u.py::b" in crashed["crash"]
    assert (crashed["file"], crashed["phase"], crashed["worker"]) == ("u.py", "p", "gw0")
    # the session's fields come from its worker event; "next" stays in the ledger
    assert {k: tests["t.py::a"][k] for k in ("file", "worker", "device", "phase")} == {
        "file": "t.py", "worker": "gw0", "device": "GPU-a", "phase": "p"
    }  # fmt: skip
    assert "next" not in tests["t.py::a"]


def test_an_announced_test_that_never_ran_is_not_a_crash(tmp_path):
    """-x or an interrupt between tests (the session-end names it), or xdist handing it elsewhere (another
    test starts instead)."""
    writer = _session(tmp_path)
    writer.write("test-start", nodeid="t.py::a")
    writer.write("test", nodeid="t.py::a", outcome="failed", next="t.py::stolen")
    writer.write("test-start", nodeid="t.py::c")
    writer.write("test", nodeid="t.py::c", outcome="failed", next="t.py::after-x")
    writer.write("session-end", not_started="t.py::after-x")
    assert ledger.unfinished(tmp_path) == []
    assert [t["nodeid"] for t in ledger.read(tmp_path).tests] == ["t.py::a", "t.py::c"]
    assert ledger.reader.running_test(tmp_path / "gw0.jsonl") is None


def test_a_session_that_ends_inside_its_announced_test_still_blames_it(tmp_path):
    """An interrupt during the test: the session ends with nothing left unstarted."""
    writer = _session(tmp_path)
    writer.write("test-start", nodeid="t.py::a")
    writer.write("test", nodeid="t.py::a", outcome="passed", next="t.py::b")
    writer.write("session-end", not_started=None)
    assert ledger.unfinished(tmp_path) == ["t.py::b"]


def test_quiet_says_whether_a_ledger_holds_anything_to_account_for(tmp_path):
    writer = _session(tmp_path)
    writer.write("test-start", nodeid="t.py::a")
    writer.write("test", nodeid="t.py::a", outcome="passed", next=None)
    assert ledger.quiet(tmp_path)
    child = ledger.LedgerWriter(tmp_path / "child", worker="gw0.42")
    child.write("finding", type="timeout", message="m")
    assert not ledger.quiet(tmp_path)
    assert not ledger.quiet(tmp_path / "child")
    _start(ledger.LedgerWriter(tmp_path / "runner", worker="main"))
    assert not ledger.quiet(tmp_path / "runner")


LINES = 8000  # about 2 MiB of both kinds of line: past the map's first chunk twice


def test_test_lines_and_another_threads_events_all_come_back_whole(tmp_path):
    """A test's line is written without the writer's lock (one copy into the map, whole under the GIL), while
    the sampler's thread writes its events under it: every line of both comes back, none torn, over
    several of the map's growths."""
    writer = ledger.LedgerWriter(tmp_path, worker="main")
    done = threading.Event()

    def sample() -> None:
        for n in range(LINES):
            writer.write("memory", sync=False, used={"GPU-1": n})
        done.set()

    thread = threading.Thread(target=sample)
    thread.start()
    for n in range(LINES):
        writer.test(f"t.py::test_{n}", "passed", 0.0, 0.0, 0.0, f"t.py::test_{n + 1}")
    thread.join()
    assert done.is_set()
    writer.close()
    lines = (tmp_path / "main.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]  # a torn line would not parse
    assert sum(e["event"] == "memory" for e in events) == LINES
    assert [e["nodeid"] for e in events if e["event"] == "test"] == [f"t.py::test_{n}" for n in range(LINES)]


def test_a_killed_writers_lines_stay_and_its_replacement_goes_on_after_them(tmp_path):
    """A writer killed mid-session (``os._exit``, nothing closed) leaves its lines, and nothing else: the
    file's size is its content; a replacement worker writes on right after them."""
    pid = os.fork()
    if pid == 0:
        killed = ledger.LedgerWriter(tmp_path, worker="gw0")
        _start(killed)
        killed.test("t.py::a", "passed", 0.0, 0.0, 0.0, "t.py::b")
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    data = (tmp_path / "gw0.jsonl").read_bytes()
    assert data.endswith(b"\n") and b"\0" not in data and len(data.splitlines()) == 2
    assert [t["nodeid"] for t in ledger.read(tmp_path).tests] == ["t.py::a", "t.py::b"]  # b: died in it
    replacement = ledger.LedgerWriter(tmp_path, worker="gw0")
    assert _start(replacement) == "gw0-2"
    replacement.close()
    data = (tmp_path / "gw0.jsonl").read_bytes()
    assert b"\0" not in data and data.endswith(b"\n") and len(data.splitlines()) == 3


def test_an_open_files_size_is_its_content(tmp_path):
    """No tail of zeros grown ahead: what ``stat`` says of a file being written is its lines."""
    writer = ledger.LedgerWriter(tmp_path, worker="main")
    for n in range(100):
        writer.test(f"t.py::test_{n}", "passed", 0.0, 0.0, 0.0, None)
    data = (tmp_path / "main.jsonl").read_bytes()
    assert os.path.getsize(tmp_path / "main.jsonl") == len(data) and data.endswith(b"\n")
    assert b"\0" not in data and len(data.splitlines()) == 100


def test_two_live_writers_of_a_name_share_its_file_line_by_line(tmp_path):
    """Two sessions at once in one ledger directory append to the same file, each line whole: every line of
    both comes back."""
    first = ledger.LedgerWriter(tmp_path, worker="main")
    second = ledger.LedgerWriter(tmp_path, worker="main")
    assert first.path == second.path
    for n in range(500):
        first.write("memory", sync=False, used={"a": n})
        second.write("memory", sync=False, used={"b": n})
    assert len(ledger.read(tmp_path).samples) == 1000
    assert os.listdir(tmp_path) == ["main.jsonl"]


def test_a_forked_child_writes_a_file_of_its_own(tmp_path):
    writer = ledger.LedgerWriter(tmp_path, worker="gw0")
    pid = os.fork()
    if pid == 0:
        _start(writer, model="child")
        writer.close()
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    _start(writer, model="parent")
    assert sorted(os.listdir(tmp_path)) == sorted(["gw0.jsonl", f"gw0.{pid}.jsonl"])
    assert sorted(r["model"] for r in ledger.read(tmp_path).records) == ["child", "parent"]


FULL_DISK = """
import sys
from harness import ledger
writer = ledger.LedgerWriter(sys.argv[1], worker="main")
for n in range(5000):  # about 600 KiB of lines, on a 64 KiB file system
    writer.test(f"t.py::test_{n}", "passed", 0.0, 0.0, 0.0, f"t.py::test_{n + 1}")
    writer.write("memory", sync=n % 100 == 0, used={"cpu": n})
writer.close()
print("went on")
"""


def _on_a_full_disk(tmp_path, script: str, *args: str) -> subprocess.CompletedProcess:
    """``script`` run by this Python with a 64 KiB tmpfs mounted at ``tmp_path / "small"`` in a private
    mount namespace (``unshare -m``: root, as in CI containers that allow it)."""
    small = tmp_path / "small"
    small.mkdir()
    (tmp_path / "script.py").write_text(script)
    shell = 'mount -t tmpfs -o size=64k tmpfs "$1" && shift && exec "$@"'
    script_path = str(tmp_path / "script.py")
    command = ["unshare", "-m", "sh", "-c", shell, "sh", str(small), sys.executable, script_path]
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here: {probe.stderr.decode().strip()}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_a_full_disk_is_one_line_on_stderr_and_the_process_goes_on(tmp_path):
    """ENOSPC on a real 64 KiB tmpfs: one ``harness: error:`` line naming the file, no SIGBUS (the mapped
    ledger's end), no traceback, and the process carries on to its end."""
    done = _on_a_full_disk(tmp_path, FULL_DISK, str(tmp_path / "small"))
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout == "went on\n"
    assert "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("harness: error: cannot write the ledger ") and "No space left on device" in line


PYTEST_ON_A_FULL_DISK = """
import sys
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "--harness-ledger-dir", sys.argv[1], sys.argv[2]]))
"""


def test_a_pytest_session_whose_ledger_fills_the_disk_passes_with_one_line_said(tmp_path):
    """The plugin's own session, its ledger on a full 64 KiB tmpfs: its tests pass (exit 0), the harness
    says so in one line, pytest shows no INTERNALERROR and is not killed by SIGBUS."""
    suite = tmp_path / "test_many.py"
    suite.write_text("import pytest\n\n@pytest.mark.parametrize('n', range(3000))\ndef test_n(n): pass\n")
    done = _on_a_full_disk(tmp_path, PYTEST_ON_A_FULL_DISK, str(tmp_path / "small"), str(suite))
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert "INTERNALERROR" not in done.stdout + done.stderr and "Traceback" not in done.stderr
    assert "3000 passed" in done.stdout
    [line] = [line for line in done.stderr.splitlines() if line.startswith("harness: error:")]
    assert "No space left on device" in line
