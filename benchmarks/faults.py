"""Backs docs/measurements.md § Faults and README.md § Exit codes: faults injected into real ``harness run``
processes; prints one row a cell (is every test accounted for, the exit code right, no process left
behind, every ledger event written before the fault kept?) and how many cells hold.

Each cell is one ``harness run`` of a small suite on the CPU platform: ``tests/test_fault.py`` (a test
before the fault, the faulty test, two after it) and ``tests/test_other.py`` (two plain tests), in one
phase that runs serially, with ``-n 2 --dist loadscope`` or with ``-n 2 --dist loadfile``. The faults:

- ``os._exit``: the test ends its process with status 3;
- ``SIGKILL``: the test kills its own process;
- ``thread timeout``: the test hangs past pytest-timeout's thread-method timeout (2 s), which ends the
  process with ``os._exit(1)``;
- ``signal timeout``: the same with the signal method (the test fails, the process lives);
- ``phase hang``: the test hangs past the phase's ``timeout_s`` (15 s; 120 s in the other cells);
- ``SIGTERM run``: ``harness run`` gets SIGTERM while the test hangs (a cancelled CI job);
- ``concurrent``: a second ``harness run`` into the same directory while the first runs the test;
- ``kill in report``: ``harness run`` gets SIGKILL as it writes the report; ``harness report DIR`` then;
- ``kill -9 run``: ``harness run`` gets SIGKILL while the test hangs, after the test started a child in a
  session of its own; ``harness report DIR`` then;
- ``full disk``: the run directory is a 1 MiB tmpfs of its own (``unshare -m``, as root) and the test fills
  it; the run must end with one ``harness: error:`` line and exit 4 (no SIGBUS, no traceback of the
  harness's; pytest prints its own when its JUnit file cannot be written), and once the space is freed
  ``harness report DIR`` must report what was written before.

Columns: ``accounted`` (every collected test has a result, or is named in an ``unaccounted`` finding when
the phase was stopped, and the faulty test is an ``error`` saying how it died), ``exit`` (got/expected),
``orphans`` (processes of the cell still alive 2 s after the run), ``ledger`` (every event of the tests
that ended before the fault is in the report). Run: ``python benchmarks/faults.py [--only KIND]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.ledger.reader import running_test  # noqa: E402

MODES = {"serial": 'workers = "serial"', "loadscope": 'workers = 2\ndist = "loadscope"',
         "loadfile": 'workers = 2\ndist = "loadfile"'}  # fmt: skip
FAULTS = {
    "os._exit": "os._exit(3)",
    "SIGKILL": "os.kill(os.getpid(), signal.SIGKILL)",
    "thread timeout": "time.sleep(60)",
    "signal timeout": "time.sleep(60)",
    "phase hang": "time.sleep(600)",
    "SIGTERM run": "time.sleep(600)",
    "concurrent": "time.sleep(3)",
    "kill in report": "pass",
    # a child in a session of its own (as an engine launcher may start one), then a hang
    "kill -9 run": "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
    "start_new_session=True); time.sleep(600)",
    "full disk": "_fill('disk/filler')",
}
EXIT = {"os._exit": 1, "SIGKILL": 1, "thread timeout": 1, "signal timeout": 1, "phase hang": 3,
        "SIGTERM run": 143, "concurrent": 0, "kill in report": 0, "kill -9 run": 137,
        "full disk": 4}  # fmt: skip
FAULT_FILE = """
import os, signal, subprocess, sys, time

def _fill(path):  # the disk under the run directory, filled as a runaway log would fill it
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(descriptor, bytes(65536)):
            pass
    except OSError:
        pass
    finally:
        os.close(descriptor)

def test_before():
    pass

def test_fault():
    {fault}

def test_after():
    pass

def test_last():
    pass
"""
OTHER_FILE = "def test_one():\n    pass\n\ndef test_two():\n    pass\n"
PYPROJECT = """
[tool.pytest.ini_options]
timeout = 2
timeout_method = "{method}"

[tool.harness.suites.faults]
paths = ["tests"]

[[tool.harness.suites.faults.phases]]
name = "p"
timeout_s = {phase_timeout}
{mode}
"""


def project(root: Path, mode: str, fault: str) -> None:
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_fault.py").write_text(FAULT_FILE.format(fault=FAULTS[fault]))
    (root / "tests" / "test_other.py").write_text(OTHER_FILE)
    method = "thread" if fault == "thread timeout" else "signal"
    timeout = 2 if "timeout" in fault else 60
    phase_timeout = 15 if fault == "phase hang" else 120  # only the hang meets it, even on a busy machine
    text = PYPROJECT.format(method=method, mode=MODES[mode], phase_timeout=phase_timeout)
    text = text.replace("timeout = 2\n", f"timeout = {timeout}\n", 1)
    (root / "pyproject.toml").write_text(text)


def environment(tag: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HARNESS_"))}
    env.update(
        PYTHONPATH=str(ROOT),
        HARNESS_NVML_MODULE="tests.fakes.absent",
        HARNESS_AMDSMI_MODULE="tests.fakes.absent",
        HARNESS_FAULTS_TAG=tag,  # finds the cell's processes afterwards
        HARNESS_MEMORY_SAMPLE_S="0",
    )
    return env


def harness(root: Path, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# the run directory on a 1 MiB tmpfs of a mount namespace of its own; after the run, the space is freed,
# `harness report` rewrites the report, and the directory is copied out before the namespace goes
SMALL_DISK = (
    'mount -t tmpfs -o size=1m tmpfs disk && "$0" -m harness run faults --platform cpu --out disk; code=$?; '
    'rm -f disk/filler; "$0" -m harness report disk > /dev/null; cp -r disk out; exit $code'
)


def on_a_small_disk(root: Path, env: dict) -> subprocess.Popen:
    (root / "disk").mkdir()
    return subprocess.Popen(
        ["unshare", "-m", "sh", "-c", SMALL_DISK, sys.executable],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def full_disk(root: Path, stderr: str) -> dict:
    """The full-disk cell: one error line naming the disk, no traceback, and the report written once the
    space is back holds the test before the fault."""
    path = root / "out" / "report.json"
    tests = {t["nodeid"]: t for t in json.loads(path.read_text())["tests"]} if path.exists() else {}
    said = [line for line in stderr.splitlines() if line.startswith("harness: error:")]
    before = tests.get("tests/test_fault.py::test_before", {}).get("outcome") == "passed"
    # the phase's pytest may print its own traceback (its JUnit file cannot be written); none of the harness's
    own = any(line.strip().startswith('File "') and "/harness/" in line for line in stderr.splitlines())
    accounted = before and not own and any("No space left" in line for line in said)
    note = f"{len(said)} error line(s): {said[-1][:80] if said else stderr[-160:]!r}"
    return {"accounted": accounted, "ledger": _whole(root / "out" / "ledger"), "note": note, "collected": 6}


def started(root: Path, nodeid: str, timeout: float = 60.0) -> bool:
    """Wait until some worker is running ``nodeid``, as its ledger says."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in (root / "out" / "ledger").rglob("*.jsonl"):
            running = running_test(path)
            if running is not None and running[0].endswith(nodeid):
                return True
        time.sleep(0.05)
    return False


def run_cell(mode: str, fault: str) -> dict:
    root = Path(tempfile.mkdtemp(prefix="faults-"))
    project(root, mode, fault)
    tag = f"{mode}-{fault}-{os.getpid()}-{time.monotonic_ns()}"
    env = environment(tag)
    args = ("run", "faults", "--platform", "cpu", "--out", "out")
    first = on_a_small_disk(root, env) if fault == "full disk" else harness(root, env, *args)
    code, extra = None, ""
    if fault == "SIGTERM run":
        started(root, "test_fault.py::test_fault")
        first.send_signal(signal.SIGTERM)
    elif fault == "concurrent":  # while the first runs its test (a fixed delay lost the race under load)
        started(root, "test_fault.py::test_fault")
        second = harness(root, env, *args)
        out, err = second.communicate(timeout=120)
        extra = f"second run: exit {second.returncode}, {len(err.splitlines())} line(s)"
        extra_ok = second.returncode == 2 and len(err.splitlines()) == 1 and "is using it" in err
    elif fault == "kill -9 run":  # nothing of harness run's own code runs: its phase's keeper ends the rest
        started(root, "test_fault.py::test_fault")
        first.kill()
        code = 128 + signal.SIGKILL if first.wait() == -signal.SIGKILL else first.returncode
        time.sleep(2.0)  # the orphans column: anything of the phase alive 2 s after the kill (4 s below)
        again = harness(root, env, "report", "out")
        again.communicate(timeout=120)
        extra = f"killed mid-test; harness report: exit {again.returncode}"
    elif fault == "kill in report":
        phases = root / "out" / "phases.json"
        while first.poll() is None and '"exit_code"' not in (phases.read_text() if phases.exists() else ""):
            time.sleep(0.005)
        time.sleep(0.05)  # into finalize: reading the ledger, writing the report files
        first.kill()
        first.wait()
        killed_with = "report.json present" if (root / "out" / "report.json").exists() else "no report.json"
        again = harness(root, env, "report", "out")
        again.communicate(timeout=120)
        code = again.returncode
        left = len(list((root / "out").glob(".*.tmp")))
        extra = f"killed in report ({killed_with}); harness report: exit {code}, {left} .tmp left"
    if code is None:
        stdout, stderr = first.communicate(timeout=300)
        code = first.returncode
    time.sleep(2.0)
    orphans = [p.pid for p in psutil.process_iter() if _tagged(p, tag)]
    checked = full_disk(root, stderr) if fault == "full disk" else check(root, fault)
    if fault == "concurrent":
        checked["accounted"] = checked["accounted"] and extra_ok
    return {
        "mode": mode,
        "fault": fault,
        **checked,
        "exit": code,
        "exit_ok": code == EXIT[fault],
        "orphans": orphans,
        "note": extra or checked.pop("note"),
        "dir": str(root),
    }


def _tagged(process: psutil.Process, tag: str) -> bool:
    try:
        return process.environ().get("HARNESS_FAULTS_TAG") == tag
    except (psutil.Error, OSError):
        return False


def check(root: Path, fault: str) -> dict:
    """accounted and ledger, from the report and the ledger files."""
    report = json.loads((root / "out" / "report.json").read_text())
    tests = {t["nodeid"]: t for t in report["tests"]}
    collected = {n for phase in report["phases"] for n in _collected(root / "out" / "ledger" / phase["name"])}
    listed = {n for f in report["findings"] if f["type"] == "unaccounted" for n in f["tests"]}
    fault_id = "tests/test_fault.py::test_fault"
    counts = [(p.get("collected"), p.get("reported")) for p in report["phases"]]
    fault_test = tests.get(fault_id, {})
    if fault in ("os._exit", "SIGKILL", "thread timeout"):  # crashes: the rest must run, the fault an error
        fault_ok = fault_test.get("outcome") == "error" and bool(fault_test.get("crash")) and not listed
    elif fault in ("phase hang", "SIGTERM run"):
        fault_ok = fault_test.get("outcome") == "error" and "stopped" in (fault_test.get("crash") or "")
    elif fault == "kill -9 run":  # its process ended under it; the tests after it are named unaccounted
        fault_ok = fault_test.get("outcome") == "error" and bool(fault_test.get("crash"))
    elif fault == "signal timeout":
        fault_ok = fault_test.get("outcome") == "failed"
    else:
        fault_ok = fault_test.get("outcome") == "passed"
    accounted = bool(collected) and collected == set(tests) | listed and not set(tests) & listed and fault_ok
    kept = tests.get("tests/test_fault.py::test_before", {}).get("outcome") == "passed"
    kept = kept and _whole(root / "out" / "ledger")
    note = f"collected/reported {counts}; fault: {fault_test.get('crash') or fault_test.get('outcome')}"
    return {"accounted": accounted, "ledger": kept, "note": note, "collected": len(collected)}


def _collected(directory: Path) -> set[str]:
    found = set()
    for path in directory.glob("*.jsonl"):
        for line in _lines(path):
            event = json.loads(line)
            if event["event"] == "collected":
                found.update(event["tests"])
    return found


def _lines(path: Path) -> list[str]:
    """A ledger file's lines, without the zero tail a killed writer of a mapped ledger leaves."""
    return path.read_text().rstrip("\0").splitlines()


def _whole(directory: Path) -> bool:
    """Every ledger line is a whole JSON event (nothing torn or lost by the fault)."""
    try:
        lines = [line for path in directory.rglob("*.jsonl") for line in _lines(path)]
        return all(json.loads(line) for line in lines)
    except json.JSONDecodeError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=list(FAULTS), action="append", help="these faults only")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: serial,loadscope,loadfile")
    args = parser.parse_args()
    rows = []
    header = ("mode", "fault", "tests", "accounted", "exit", "orphans", "ledger")
    print("{:<10} {:<15} {:>5} {:<9} {:<10} {:<7} {:<6} note".format(*header))
    for fault in args.only or FAULTS:
        for mode in args.modes.split(","):
            row = run_cell(mode, fault)
            rows.append(row)
            exit_ = f"{row['exit']}/{EXIT[fault]}"
            print(
                f"{mode:<10} {fault:<15} {row['collected']:>5} {_yes(row['accounted']):<9} "
                f"{exit_ + ('' if row['exit_ok'] else ' ✗'):<10} {len(row['orphans']):<7} "
                f"{_yes(row['ledger']):<6} {row['note']}",
                flush=True,
            )
    holds = [r["accounted"] and r["exit_ok"] and not r["orphans"] and r["ledger"] for r in rows]
    print(f"\n{sum(holds)} of {len(rows)} cells hold")
    sys.exit(0 if all(holds) else 1)


def _yes(value: bool) -> str:
    return "yes" if value else "NO"


if __name__ == "__main__":
    main()
