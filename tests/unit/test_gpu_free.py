"""GPU-free tests (harness.report.gpu_free): a test is listed exactly when no runner of its worker and phase
was alive in any of its seconds and its process held no device memory; each with the GPU-minutes it held."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from harness.report.gpu_free import gpu_free, total_minutes

WORKERS = st.sampled_from(["gw0", "gw1"])
PHASES = st.sampled_from(["shared-engine", "standalone"])
SECONDS = st.floats(0, 100)


@st.composite
def results(draw) -> dict:
    return {
        "t": draw(st.floats(100, 1000)),
        "nodeid": f"t.py::test_{draw(st.integers(0, 10**6))}",
        "file": "t.py",
        "outcome": draw(st.sampled_from(["passed", "failed", "skipped", "error"])),
        "setup_s": draw(SECONDS | st.none()),
        "call_s": draw(SECONDS | st.none()),
        "teardown_s": draw(SECONDS | st.none()),
        "worker": draw(WORKERS),
        "device": "GPU-0",
        "phase": draw(PHASES),
        **({"device_bytes": draw(st.integers(0, 2**40))} if draw(st.booleans()) else {}),
    }


@st.composite
def runners(draw) -> dict:
    start = draw(st.floats(0, 1000))
    return {
        "worker": draw(WORKERS),
        "phase": draw(PHASES),
        "start": start,
        "stop": draw(st.none() | st.floats(start, 1100)),
    }


def _overlaps(test: dict, record: dict) -> bool:
    took = sum(test.get(k) or 0.0 for k in ("setup_s", "call_s", "teardown_s"))
    start, end = test["t"] - took, test["t"]
    same = (record["worker"], record["phase"]) == (test["worker"], test["phase"])
    return same and record["start"] < end and (record["stop"] is None or record["stop"] > start)


@given(st.lists(results(), max_size=20), st.lists(runners(), max_size=8), st.integers(1, 8))
def test_listed_exactly_when_nothing_held_the_gpu(found: list, live: list, devices: int) -> None:
    listed = gpu_free("cuda", found, live, {"gw0": devices, "gw1": devices})
    expected = {
        test["nodeid"]
        for test in found
        if test["outcome"] != "skipped"
        and not test.get("device_bytes")
        and not any(_overlaps(test, record) for record in live)
    }
    assert {each["nodeid"] for each in listed} == expected
    assert all(each["gpu_minutes"] >= 0 and each["devices"] == devices for each in listed)
    assert total_minutes(listed) >= 0
    assert [each["gpu_minutes"] for each in listed] == sorted(
        (each["gpu_minutes"] for each in listed), reverse=True
    )


@given(st.lists(results(), max_size=10))
def test_nothing_is_gpu_free_off_a_gpu(found: list) -> None:
    assert gpu_free("cpu", found, [], {}) == [] and gpu_free(None, found, [], {}) == []


def test_minutes_are_seconds_times_devices() -> None:
    test = {
        "t": 700.0,
        "nodeid": "t.py::test_tok",
        "file": "t.py",
        "outcome": "passed",
        "setup_s": 0.5,
        "call_s": 119.0,
        "teardown_s": 0.5,
        "worker": "gw0",
        "device": "GPU-0",
        "phase": "p",
    }
    engine = {"worker": "gw0", "phase": "p", "start": 0.0, "stop": 500.0}  # stopped before the test began
    [listed] = gpu_free("rocm", [test], [engine], {"gw0": 2})
    assert (listed["seconds"], listed["devices"], listed["gpu_minutes"]) == (120.0, 2, 4.0)
