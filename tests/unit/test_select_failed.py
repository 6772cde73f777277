"""A test that failed or errored in the history runs again whatever the change (issue 59's replay found
it: at 1c35a9de four tests that failed at the parent, and still failed, met no changed file, and selection
skipped them, so the build went green over a red test). Held as a property, and through ``harness run``'s
reader of the history (``report.previous.History.failed``)."""

from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st

from harness.report.previous import from_report
from harness.report.schema import ABSENT
from harness.run.selecting import _footprints
from harness.select import rules
from harness.select.choose import choose
from harness.select.table import encode

TESTS = [f"tests/test_{f}.py::test_{n}" for f in "abc" for n in range(3)]
SOURCES = [f"src/m{i}.py" for i in range(4)]
DEFAULT = rules.load({})


@given(
    st.dictionaries(st.sampled_from(TESTS), st.sets(st.sampled_from(SOURCES), max_size=3)),
    st.lists(st.sampled_from(SOURCES), max_size=3),
    st.sets(st.sampled_from(TESTS)),
)
def test_a_test_that_failed_in_the_history_is_selected_whatever_the_change(footprints, changed, failed):
    made = choose(TESTS, footprints, {}, changed, DEFAULT, failed=failed)
    assert failed <= set(made.selected) and not failed & set(made.skipped)
    alone = choose(TESTS, footprints, {}, changed, DEFAULT)
    assert set(made.selected) == set(alone.selected) | failed  # it adds them, and nothing else
    for test in failed:
        assert made.selected[test] in ("it failed in the history", alone.selected.get(test))


def test_the_history_s_failed_tests_reach_the_selection():
    """``harness run`` hands History.failed (the failed and errored tests of its one previous run) on."""
    tests = [
        {"nodeid": nodeid, "outcome": outcome, "setup_s": 0.0, "call_s": 0.0, "teardown_s": 0.0}
        for nodeid, outcome in (("t.py::a", "failed"), ("t.py::b", "passed"), ("t.py::c", "error"))
    ]
    footprints = encode({"t.py::a": ["m.py"], "t.py::b": ["m.py"], "t.py::c": ["m.py"]}, {})
    report = {**copy.deepcopy(ABSENT), "version": 1, "suite": "s", "platform": {"name": "cpu"}}
    report |= {"records": [], "tests": tests, "footprints": footprints}
    *_, unit, failed = _footprints(from_report(report, "hist"))  # type: ignore[arg-type]
    assert sorted(failed) == ["t.py::a", "t.py::c"]
    made = choose([t["nodeid"] for t in tests], *_footprints(from_report(report, "hist"))[:2], ["x.py"],
                  rules.load({"ignore": ["x.py"]}), unit, failed=failed)  # fmt: skip
    assert made.skipped == ("t.py::b",)
