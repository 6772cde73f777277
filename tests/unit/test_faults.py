"""Crashes, cancels and hostile content: a serial crash is an error and the file goes on, SIGTERM to
``harness run`` stops the phase's group and still reports, the run directory keeps what is not ours,
secrets and markup never reach the report files. Real ``harness run`` processes in pytester projects."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from harness.cli import main as harness
from harness.ledger.reader import running_test
from harness.run import directory
from harness.run.exits import run_exit
from harness.run.process import Ended, Kept, run_phase
from harness.run.watchdog import NOT_STARTED
from tests.unit.report_runs import Run

pytest_plugins = ["pytester"]

SERIAL = """
[tool.harness.suites.models]
paths = ["tests"]

[[tool.harness.suites.models.phases]]
name = "p"
workers = "serial"
"""
CRASHES = """
import os, signal

def test_a():
    pass

def test_exit():
    os._exit(3)

def test_b():
    pass

def test_kill():
    os.kill(os.getpid(), signal.SIGKILL)

def test_c():
    pass
"""


@pytest.fixture
def project(pytester, fake_gpus):
    fake_gpus([], vendor="nvidia")

    def make(toml: str, **files: str):
        pytester.makefile(".toml", pyproject=toml)
        pytester.mkdir("tests")
        for name, text in files.items():
            (pytester.path / "tests" / f"{name}.py").write_text(text)
        return pytester.path

    return make


def test_a_serial_crash_is_an_error_and_the_rest_of_the_file_still_runs(project, capsys):
    root = project(SERIAL, test_crash=CRASHES)
    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 1
    report = json.loads((root / "out" / "report.json").read_text())
    outcomes = {t["nodeid"].split("::")[1]: (t["outcome"], t.get("crash")) for t in report["tests"]}
    where = "while running tests/test_crash.py"
    assert outcomes == {
        "test_a": ("passed", None),
        "test_exit": ("error", f"worker main exited with status 3 {where}::test_exit"),
        "test_b": ("passed", None),
        "test_kill": ("error", f"worker main killed by SIGKILL {where}::test_kill"),
        "test_c": ("passed", None),
    }
    (phase,) = report["phases"]
    assert (phase["collected"], phase["reported"], phase["exit_code"], phase["attempts"]) == (5, 5, 1, 3)
    assert not [f for f in report["findings"] if f["type"] == "unaccounted"]
    junit = (root / "out" / "junit.xml").read_text()
    assert junit.count("<testcase") == 5 and 'message="worker main killed by SIGKILL' in junit
    closing = capsys.readouterr().out.strip().splitlines()[-1]
    assert closing.startswith("harness: 3 passed, 2 failed, 0 skipped; 2 crashed (worker main exited")


HANG = """
import time

def test_before():
    pass

def test_hangs():
    time.sleep(600)

def test_after():
    pass
"""


@pytest.mark.timeout(300)
def test_sigterm_stops_the_phase_group_and_still_writes_the_report(project, tmp_path):
    root = project(SERIAL, test_hang=HANG)
    env = {**os.environ, "HARNESS_FAULT_TAG": str(tmp_path)}
    run = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", "--platform", "cpu", "--out", "out", "models"],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    ledger = root / "out" / "ledger" / "p" / "main.jsonl"
    try:  # a run that never gets there: the test's timeout ends it
        while running_test(ledger) != ("tests/test_hang.py::test_hangs", "tests/test_hang.py"):
            assert run.poll() is None
            time.sleep(0.05)
    finally:  # a run that never got there is stopped as a cancelled job is, not left hanging for 600 s
        run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=60) == 128 + signal.SIGTERM
    report = json.loads((root / "out" / "report.json").read_text())
    tests = {t["nodeid"].split("::")[1]: t for t in report["tests"]}
    assert tests["test_before"]["outcome"] == "passed"
    assert tests["test_hangs"]["crash"].endswith("was stopped: harness run got SIGTERM while running "
                                                 "tests/test_hang.py::test_hangs")  # fmt: skip
    (unaccounted,) = [f for f in report["findings"] if f["type"] == "unaccounted"]
    assert unaccounted["tests"] == ["tests/test_hang.py::test_after"]
    assert report["phases"][0]["stopped"] == "SIGTERM"
    alive = [p for p in psutil.process_iter() if _environ(p).get("HARNESS_FAULT_TAG") == str(tmp_path)]
    assert alive == []


def _environ(process: psutil.Process) -> dict:
    try:
        return process.environ()
    except (psutil.Error, OSError):
        return {}


def test_clearing_a_run_directory_keeps_what_the_harness_did_not_write(tmp_path):
    out = tmp_path / "out"
    (out / "ledger" / "p").mkdir(parents=True)
    (out / "junit").mkdir()
    (out / "ledger" / "p" / "gw0.jsonl").write_text("{}\n")
    (out / "ledger" / "notes.txt").write_text("mine")
    (out / "junit" / "p.xml").write_text("<testsuite/>")
    (out / "report.json").write_text("{}")  # a killed re-run's stale report
    (out / ".report.json.abc.tmp").write_text("half")
    (out / "README").write_text("mine too")
    outside = tmp_path / "outside.jsonl"
    outside.write_text("keep")
    (out / "ledger" / "p" / "gw1.jsonl").symlink_to(outside)
    directory.clear(out)
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert left == ["README", "ledger", "ledger/notes.txt"]
    assert outside.read_text() == "keep"


def test_secrets_are_redacted_in_every_report_file(tmp_path):
    token = "ghp_abcdefghijklmnop1234"
    run = Run(tmp_path).phase("p", 0, 10)
    run.worker("p").test(f"tests/t.py::test_uses[{token}]")
    env = {
        "HARNESS_GITHUB_PAT": token,
        "HARNESS_ROCM_INDEX_URL": "https://ci-user:s3cr3t-pass@wheels.example.com/rocm6.4",
        "HARNESS_API_KEY_FILE": "/keys/k",
    }
    report = run.finalize(env)
    assert report["environment"] == {
        "HARNESS_API_KEY_FILE": "[redacted]",
        "HARNESS_GITHUB_PAT": "[redacted]",
        "HARNESS_ROCM_INDEX_URL": "https://[redacted]@wheels.example.com/rocm6.4",
    }
    for path in tmp_path.glob("*.*"):
        text = path.read_text()
        assert token not in text and "s3cr3t-pass" not in text, path.name


def test_report_html_shows_markup_from_test_ids_as_text(tmp_path):
    run = Run(tmp_path, suite="<b>suite</b>").phase("p", 0, 10)
    worker = run.worker("p")
    evil = "tests/t.py::test_x[<img src=x onerror=alert(1)>]"
    worker.runner(evil, 1, 2, None, model="<script>alert(2)</script>")  # never stopped: a finding
    worker.test(evil, outcome="failed")
    run.finalize()
    page = (tmp_path / "report.html").read_text()
    assert "<img" not in page and "<script>alert" not in page and "<b>suite" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


def test_more_crashes_than_xdist_restarts_are_resumed_until_every_test_has_a_result(project):
    crashes = "".join(f"def test_crash{i}():\n    os._exit(3)\n\n" for i in range(4))
    root = project(SERIAL.replace('workers = "serial"', 'workers = 2\ndist = "loadfile"'),
                   test_many=f"import os\n\n{crashes}def test_ok():\n    pass\n")  # fmt: skip
    argv = ["run", "--platform", "cpu", "--out", "out", "models", "--", "--max-worker-restart=1"]
    assert harness(argv) == 1
    report = json.loads((root / "out" / "report.json").read_text())
    (phase,) = report["phases"]
    assert (phase["collected"], phase["reported"]) == (5, 5) and phase["attempts"] > 1
    assert sorted(t["outcome"] for t in report["tests"]) == ["error"] * 4 + ["passed"]


def test_a_plain_pytest_run_removes_its_temporary_ledger(pytester, fake_gpus, monkeypatch, tmp_path):
    fake_gpus([], vendor="nvidia")
    monkeypatch.delenv("HARNESS_LEDGER_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    for workers in ("0", "2"):
        pytester.runpytest_subprocess("-n", workers).assert_outcomes(passed=1)
    assert list((tmp_path / "tmp").glob("harness-ledger-*")) == []


# A test that starts a child in a session of its own (as an engine launcher may), says where, then hangs
# until the file RELEASE exists; the junit file names the run (RUN) it belongs to.
ESCAPES = """
import os, pathlib, subprocess, sys, time

def test_escapes(record_property):
    record_property("run", os.environ["RUN"])
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    pathlib.Path("child.pid").write_text(str(child.pid))
    while not pathlib.Path(os.environ["RELEASE"]).exists():
        time.sleep(0.05)
"""


@pytest.mark.timeout(300)
def test_kill_9_of_harness_run_ends_every_process_of_the_phase_and_no_stale_writer_is_left(project, tmp_path):
    root = project(SERIAL, test_escapes=ESCAPES)
    release = tmp_path / "release"  # the first run's test hangs until it exists: only the keeper ends it
    env = {**os.environ, "HARNESS_FAULT_TAG": str(tmp_path), "RELEASE": str(release), "RUN": "first"}
    argv = [sys.executable, "-m", "harness", "run", "--platform", "cpu", "--out", "out", "models"]
    first = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # a run that never gets there, or processes that never end: the test's timeout ends the wait
        while not (root / "child.pid").exists():
            assert first.poll() is None
            time.sleep(0.05)
        child = psutil.Process(int((root / "child.pid").read_text()))
        first.kill()  # SIGKILL: nothing of harness run's own code runs now
        first.wait()
        while _tagged(str(tmp_path)):  # the test hangs for good: only the keeper can end it
            time.sleep(0.05)
    finally:
        first.kill()
        if _tagged(str(tmp_path)):  # what a failed keeper left: its hang ends too
            release.touch()
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    # the next run into the same directory: nothing of the first may write there, during or after it
    second = subprocess.run(
        argv, cwd=root, env={**env, "RELEASE": os.devnull, "RUN": "second"}, capture_output=True
    )
    assert second.returncode == 0, second.stderr
    junit = root / "out" / "junit" / "p.xml"
    written = junit.read_bytes()
    release.touch()  # the first run's hang is over: had any of it lived, it would write now
    assert _tagged(str(tmp_path)) == []
    assert junit.read_bytes() == written and b'value="second"' in written


def _tagged(tag: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.status() != psutil.STATUS_ZOMBIE and _environ(process).get("HARNESS_FAULT_TAG") == tag:
                found.append(process)
    return found


def test_a_phase_that_ends_takes_a_child_in_its_own_session_with_it(tmp_path):
    """The keeper's subreaper: a process the phase started with setsid() and left behind is still killed."""
    spawn = (
        "import subprocess, sys; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
        "start_new_session=True); "
        f"open({str(tmp_path / 'pid')!r}, 'w').write(str(child.pid))"
    )
    assert run_phase([sys.executable, "-c", spawn], dict(os.environ), 60) == Ended(0)
    child = int((tmp_path / "pid").read_text())
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_a_phase_that_cannot_be_started_is_a_harness_fault(tmp_path):
    kept = Kept([str(tmp_path / "no-such-python"), "-m", "pytest"], dict(os.environ), stderr=subprocess.PIPE)
    assert kept.end() == NOT_STARTED
    assert run_exit([{"exit_code": NOT_STARTED, "timed_out": False}]) == 4


def test_a_crash_in_a_file_whose_name_holds_brackets_resumes_the_rest_of_the_file(project):
    """pytest refuses any path argument holding ``[`` (parametrization): the resume reaches the file
    through its folder, the tests that ran deselected."""
    root = project(SERIAL, **{"test_grid[1]": CRASHES})
    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 1
    report = json.loads((root / "out" / "report.json").read_text())
    outcomes = {t["nodeid"].split("::")[1]: t["outcome"] for t in report["tests"]}
    assert outcomes == {"test_a": "passed", "test_exit": "error", "test_b": "passed", "test_kill": "error",
                        "test_c": "passed"}  # fmt: skip


RUN_ON_A_FULL_DISK = """
import os, subprocess, sys
small, project = sys.argv[1], sys.argv[2]
codes = []
for kib in range(40, 64, 2):  # the disk fills at each of the run's writes in turn
    os.makedirs(small + "/fill", exist_ok=True)
    with open(small + "/fill/x", "wb") as filler:
        try:
            filler.write(b"x" * 1024 * kib)
        except OSError:
            pass
    done = subprocess.run([sys.executable, "-m", "harness", "run", "--platform", "cpu", "--out",
                           small + "/out", "models"], cwd=project, capture_output=True, text=True)
    errors = [line for line in done.stderr.splitlines() if line.startswith("harness: error:")]
    codes.append((kib, done.returncode, "Traceback" in done.stderr + done.stdout, len(errors)))
    subprocess.run(["rm", "-rf", small + "/out", small + "/fill"])
print(codes)
"""


def test_a_full_disk_under_out_is_one_line_and_exit_4_wherever_the_run_meets_it(project, tmp_path):
    from tests.unit.test_ledger import _on_a_full_disk

    root = project(SERIAL, test_ok="def test_ok():\n    pass\n")
    done = _on_a_full_disk(tmp_path, RUN_ON_A_FULL_DISK, str(tmp_path / "small"), str(root))
    assert done.returncode == 0, done.stderr[-2000:]
    codes = eval(done.stdout)  # noqa: S307 (the script's own list of tuples)
    full = [(kib, code, traceback, errors) for kib, code, traceback, errors in codes if code != 0]
    assert full, codes  # the disk was full somewhere
    wrong = [entry for entry in full if entry[1:] != (4, False, 1)]
    assert wrong == [], codes
