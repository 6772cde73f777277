"""One xdist worker per GPU, the gpus(n) marker and the platform timeouts, on fake NVML / amdsmi machines.

Every test runs a real pytest session (with real xdist workers) in a subprocess. A conftest in the
session records, at its import time, the masks each worker's environment holds: that is before any hook
of ours runs in the worker, the point where a suite's conftest might import torch.
"""

from __future__ import annotations

import json
import os

import pytest

from harness import ledger
from tests.fakes import gpu

pytest_plugins = ["pytester"]

RECORDER = """
import json, os, pathlib

worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
names = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")
masks = {name: os.environ.get(name) for name in names}
pathlib.Path("seen").mkdir(exist_ok=True)
pathlib.Path("seen", worker + ".json").write_text(json.dumps(masks))


def pytest_sessionstart(session):
    from harness.pytest_plugin.pinning import worker_event

    pathlib.Path("events").mkdir(exist_ok=True)
    pathlib.Path("events", worker + ".json").write_text(json.dumps(worker_event(session.config)))
"""


def uuid(number: int) -> str:
    return gpu(number)["uuid"]


@pytest.fixture(autouse=True)
def not_in_an_xdist_worker(monkeypatch):
    """The sessions here decide for themselves whether they are xdist workers: when these tests run under
    xdist, the outer worker's variables (``PYTEST_XDIST_WORKER``...) must not reach them."""
    for name in [name for name in os.environ if name.startswith("PYTEST_XDIST_")]:
        monkeypatch.delenv(name)


@pytest.fixture
def cuda4(fake_gpus):
    fake_gpus([gpu(i) for i in range(4)], vendor="nvidia")


@pytest.fixture
def rocm2(fake_gpus):
    fake_gpus([gpu(i, name="AMD Instinct MI300X") for i in range(2)], vendor="amd")


@pytest.fixture
def xpu2(fake_gpus):
    fake_gpus([gpu(i, name="Intel(R) Data Center GPU Max 1550") for i in range(2)], vendor="intel")


@pytest.fixture
def session(pytester):
    """``session(*args, tests=...)``: a pytest run of the recorder conftest and the given test file."""
    pytester.makeconftest(RECORDER)

    def run(*args: str, tests: str = "def test_one():\n    pass\n"):
        pytester.makepyfile(test_file=tests)
        return pytester.runpytest_subprocess("--harness", *args, "-p", "no:cacheprovider")

    return run


def seen(pytester) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (pytester.path / "seen").glob("gw*.json")}


def events(pytester) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (pytester.path / "events").glob("*.json")}


def test_auto_starts_one_worker_per_gpu_each_pinned_to_its_own(cuda4, session, pytester):
    result = session("-n", "auto")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*4 workers*"])
    masks = seen(pytester)
    assert sorted(m["CUDA_VISIBLE_DEVICES"] for m in masks.values()) == ["0", "1", "2", "3"]
    recorded = events(pytester)
    for worker, mask in masks.items():
        index = int(mask["CUDA_VISIBLE_DEVICES"])
        assert recorded[worker]["devices"] == [uuid(index)]
        assert recorded[worker]["mask"] == str(index)
    assert recorded["main"]["devices"] == [uuid(i) for i in range(4)]


def test_outer_mask_entries_are_dealt_as_they_are(cuda4, session, pytester, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    result = session("-n", "2")
    assert result.ret == 0, result.stdout.str()
    masks = seen(pytester)
    assert sorted(m["CUDA_VISIBLE_DEVICES"] for m in masks.values()) == ["1", "3"]
    recorded = events(pytester)
    assert {w: e["devices"] for w, e in recorded.items() if w != "main"} == {
        w: [uuid(int(m["CUDA_VISIBLE_DEVICES"]))] for w, m in masks.items()
    }


def test_uuid_mask_entries_stay_uuids(cuda4, session, pytester, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{uuid(2)},{uuid(0)}")
    result = session("-n", "auto")
    assert result.ret == 0, result.stdout.str()
    masks = seen(pytester)
    assert sorted(m["CUDA_VISIBLE_DEVICES"] for m in masks.values()) == sorted([uuid(2), uuid(0)])
    recorded = events(pytester)
    for worker, mask in masks.items():
        assert recorded[worker]["devices"] == [mask["CUDA_VISIBLE_DEVICES"]]


def test_more_workers_than_gpus_is_one_line(cuda4, session):
    result = session("-n", "5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: -n 5 asks for more workers than the 4 visible GPU(s) *workers_per_gpu*"]
    )
    assert "Traceback" not in result.stderr.str()


def test_workers_per_gpu_shares_devices_device_major(cuda4, session, pytester, monkeypatch):
    monkeypatch.setenv("HARNESS_WORKERS_PER_GPU", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    result = session("-n", "auto")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*4 workers*"])
    assert sorted(m["CUDA_VISIBLE_DEVICES"] for m in seen(pytester).values()) == ["2", "2", "3", "3"]


def test_a_forced_cuda_session_records_its_devices_and_timeout_first(cuda4, pytester, monkeypatch):
    """HARNESS_PLATFORM=cuda: the ledger's worker event, written once the tests are collected, names the
    devices and the timeout in force and comes before the tests, so each test gets its device."""
    monkeypatch.setenv("HARNESS_PLATFORM", "cuda")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    pytester.makepyfile(test_file="def test_one():\n    pass\n")
    result = pytester.runpytest_subprocess("--harness", f"--harness-ledger-dir={pytester.path / 'ledger'}")
    result.assert_outcomes(passed=1)
    kinds = [e["event"] for e in ledger.events(pytester.path / "ledger" / "main.jsonl")]
    assert kinds.index("worker") < kinds.index("test")
    (worker,) = ledger.read(pytester.path / "ledger").workers
    assert worker["devices"] == [uuid(2)] and worker["mask"] == "2"
    assert (worker["timeout"], worker["timeout_method"]) == (900.0, "signal")
    assert [t["device"] for t in ledger.read(pytester.path / "ledger").tests] == [uuid(2)]


@pytest.mark.parametrize("without", [[], ["-p", "no:harness-recorder"]], ids=["recording", "not recording"])
def test_a_forced_cuda_sessions_bad_mask_stops_it_before_any_test(cuda4, pytester, monkeypatch, without):
    monkeypatch.setenv("HARNESS_PLATFORM", "cuda")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "abc")
    pytester.makepyfile(test_file="def test_one():\n    open('ran', 'w').close()\n")
    result = pytester.runpytest_subprocess("--harness", *without)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: CUDA_VISIBLE_DEVICES='abc'*"])
    assert "Traceback" not in result.stderr.str() and not (pytester.path / "ran").exists()


def test_replacement_of_a_crashed_worker_gets_its_device(cuda4, session, pytester):
    crash_once = """
import os, pathlib

def test_crash():
    if not pathlib.Path("crashed").exists():
        pathlib.Path("crashed").write_text(os.environ["PYTEST_XDIST_WORKER"])
        os._exit(1)

def test_after():
    pass
"""
    result = session("-n", "2", "--dist", "loadfile", tests=crash_once)
    result.stdout.fnmatch_lines(["*created: 2/2 workers*", "*replacing crashed worker*"])
    masks = seen(pytester)
    crashed = (pytester.path / "crashed").read_text()
    (replacement,) = set(masks) - {"gw0", "gw1"}
    assert masks[replacement]["CUDA_VISIBLE_DEVICES"] == masks[crashed]["CUDA_VISIBLE_DEVICES"]


def test_rocm_sets_hip_and_a_matching_cuda_mask(rocm2, session, pytester):
    result = session("-n", "auto")
    assert result.ret == 0, result.stdout.str()
    masks = seen(pytester)
    assert sorted(m["HIP_VISIBLE_DEVICES"] for m in masks.values()) == ["0", "1"]
    for mask in masks.values():
        assert mask["CUDA_VISIBLE_DEVICES"] == mask["HIP_VISIBLE_DEVICES"]
        assert mask["ROCR_VISIBLE_DEVICES"] is None


def test_rocm_outer_rocr_mask_is_kept_and_hip_indexes_into_it(rocm2, session, pytester, monkeypatch):
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "1")
    result = session("-n", "auto")
    assert result.ret == 0, result.stdout.str()
    assert seen(pytester) == {
        "gw0": {
            "CUDA_VISIBLE_DEVICES": "0",
            "HIP_VISIBLE_DEVICES": "0",
            "ROCR_VISIBLE_DEVICES": "1",
            "ZE_AFFINITY_MASK": None,
        }
    }
    assert events(pytester)["gw0"]["devices"] == [uuid(1)]


def test_cpu_auto_uses_cpu_workers_and_sets_no_mask(fake_gpus, session, pytester, monkeypatch):
    fake_gpus([], vendor="nvidia")
    monkeypatch.setenv("HARNESS_CPU_WORKERS", "2")
    result = session("-n", "auto")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*2 workers*"])
    masks = seen(pytester)
    assert len(masks) == 2
    assert all(value is None for mask in masks.values() for value in mask.values())
    assert {e["devices"][0] for e in events(pytester).values()} == {"cpu"}


MULTI_GPU = """
import os, pytest

@pytest.mark.gpus(2)
def test_two():
    print("visible", os.environ["CUDA_VISIBLE_DEVICES"])

@pytest.mark.gpus(8)
def test_eight():
    pass

def test_plain():
    print("visible", os.environ.get("CUDA_VISIBLE_DEVICES"))
"""


def test_gpus_marker_skips_in_a_one_gpu_worker_with_the_counts(cuda4, session):
    result = session("-n", "2", "-rs", tests=MULTI_GPU)
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["*needs 2 GPUs, 1 visible*"])
    result.stdout.fnmatch_lines(["*needs 8 GPUs, 1 visible*"])


def test_gpus_marker_serially_sees_its_first_n_devices(cuda4, session, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2,3")
    result = session("-s", "-rs", tests=MULTI_GPU)
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["test_file.py visible 1,2", ".svisible 1,2,3", "*needs 8 GPUs, 3 visible*"])


def test_gpus_marker_needs_a_positive_count(cuda4, session):
    result = session(tests="import pytest\n@pytest.mark.gpus('two')\ndef test_x():\n    pass\n")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: test_file.py::test_x: the gpus marker takes one positive integer*"])


HANGS = """
import time, pytest

def test_hangs():
    time.sleep(120)

def test_after_the_hang():
    pass

@pytest.mark.timeout(0)
def test_marker_overrides():
    time.sleep(3)
"""


def test_platform_timeout_fails_a_hung_test_by_name_and_the_run_goes_on(cuda4, session, monkeypatch):
    monkeypatch.setenv("HARNESS_TEST_TIMEOUT_S", "2")
    _timed_out(session("-n", "1", tests=HANGS), "2.0", "test_hangs", passed=2)


def _timed_out(result, seconds: str, test: str, passed: int) -> None:
    """``test`` failed by a timeout of ``seconds``, with pytest-timeout's message; the others passed."""
    result.assert_outcomes(passed=passed, failed=1)
    result.stdout.fnmatch_lines([f"*Timeout (>{seconds}s)*", f"FAILED test_file.py::{test}*"])


def test_rocm_default_timeout_is_longer_than_cudas(rocm2, session):
    result = session()
    result.stdout.fnmatch_lines(["timeout: 1800.0s", "timeout method: signal"])


def test_users_timeout_option_wins_over_the_platform_default(cuda4, session, monkeypatch):
    monkeypatch.setenv("HARNESS_TEST_TIMEOUT_S", "100")
    result = session("-n", "1", "--timeout", "1", tests=HANGS)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*Timeout (>1.0s)*"])


# each test 2 s of a 3 s timeout (a second to spare for a loaded host), together past it
WATCHED = """
import time, pytest

def test_first_half():
    time.sleep(2)

def test_second_half_outlives_the_alarm_armed_before_it():
    time.sleep(2)

@pytest.mark.timeout(0.3)
def test_a_sooner_deadline_rearms_the_alarm():
    time.sleep(5)
"""


def test_each_test_gets_pytest_timeouts_own_deadline_and_report(cuda4, session):
    """Tests that together outlive one timeout pass; a marker's sooner deadline fails its test."""
    result = session("--timeout", "3", tests=WATCHED)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*Timeout (>0.3s) from pytest-timeout*", "FAILED *sooner_deadline*"])


GUARDED = """
import signal, time

def test_a_guard_turns_every_alarm_off():
    signal.alarm(0)

def test_hangs_after_it():
    time.sleep(12)
"""


def test_a_test_that_turns_alarms_off_leaves_the_next_tests_timeout(cuda4, session, monkeypatch):
    """``signal.alarm(0)`` (a common guard, also inside libraries) ends only the running test's timer: the
    platform's default still fails a later hang, as plain pytest-timeout does."""
    monkeypatch.setenv("HARNESS_TEST_TIMEOUT_S", "3")
    _timed_out(session(tests=GUARDED), "3.0", "test_hangs_after_it", passed=1)


# as WATCHED: 2 s of a 3 s default each; the marked test outlives the default by half a second
DEFAULTED = """
import time, pytest

def test_first():
    time.sleep(2)

def test_second_outlives_the_alarm_armed_at_collection():
    time.sleep(2)

@pytest.mark.timeout(0)
def test_none_by_its_marker():
    time.sleep(3.5)

def test_hangs_after_it():
    time.sleep(30)
"""


def test_the_default_timeout_counts_from_each_tests_own_start(cuda4, session, monkeypatch):
    """Each test gets the whole default from its own start, a ``timeout(0)`` test none, and the test after
    that one its own again."""
    monkeypatch.setenv("HARNESS_TEST_TIMEOUT_S", "3")
    _timed_out(session(tests=DEFAULTED), "3.0", "test_hangs_after_it", passed=3)


NESTED = """
import time

def test_a_pytest_session_in_this_process(pytester):
    pytester.makepyfile("def test_x():\\n    pass\\n")
    pytester.runpytest_inprocess("--harness", "-p", "no:cacheprovider").assert_outcomes(passed=1)

def test_hangs_after_it():
    time.sleep(30)
"""


def test_a_session_run_inside_a_test_leaves_the_outer_sessions_alarm(cuda4, session, monkeypatch):
    """pytester's in-process run sets timers of its own: the outer session's later tests keep theirs."""
    monkeypatch.setenv("HARNESS_TEST_TIMEOUT_S", "3")
    _timed_out(session("-p", "pytester", tests=NESTED), "3.0", "test_hangs_after_it", passed=1)


def test_a_bad_gpus_marker_under_xdist_fails_its_test_not_the_session(cuda4, session):
    result = session("-n", "2", tests="import pytest\n@pytest.mark.gpus('two')\ndef test_x():\n    pass\n")
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_file.py::test_x: the gpus marker takes one positive integer*"])


def test_intel_gpus_get_one_worker_each_pinned_by_ze_affinity_mask(xpu2, session, pytester):
    result = session("-n", "auto")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*2 workers*"])
    masks = seen(pytester)
    assert sorted(m["ZE_AFFINITY_MASK"] for m in masks.values()) == ["0", "1"]
    assert all(m["CUDA_VISIBLE_DEVICES"] is None for m in masks.values())  # Level Zero's variable only
    recorded = events(pytester)
    for worker, mask in masks.items():
        assert recorded[worker]["devices"] == [uuid(int(mask["ZE_AFFINITY_MASK"])).removeprefix("GPU-")]
