"""A changed test module this run did not collect (another suite's, or one ``-m``/``-k`` left out) and no
footprint holds is code no test here ran: it selects nothing, where before it selected every test of the
suite ("no footprint and no rule explains it"), so one suite's CI cell reran in full for a test edited in
another's. Held as a property: such a file never selects or skips a test it should not; a test module
that a footprint holds still selects its tests; a conftest stays global; any other unexplained file
still selects everything."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from harness.select import rules
from harness.select.choose import choose

TESTS = [f"tests/a/test_{f}.py::test_{n}" for f in "xy" for n in range(3)]
SOURCES = [f"src/m{i}.py" for i in range(4)]
ELSEWHERE = ["tests/b/test_other.py", "tests/b/sub/other_test.py", "suite2/test_z.py"]  # not collected
DEFAULT = rules.load({})


@given(
    st.dictionaries(st.sampled_from(TESTS), st.sets(st.sampled_from(SOURCES), max_size=3)),
    st.lists(st.sampled_from(SOURCES), max_size=3),
    st.lists(st.sampled_from(ELSEWHERE), min_size=1, max_size=3),
)
def test_an_uncollected_test_module_in_no_footprint_selects_nothing(footprints, changed, elsewhere):
    alone = choose(TESTS, footprints, {}, changed, DEFAULT)
    made = choose(TESTS, footprints, {}, [*changed, *elsewhere], DEFAULT)
    assert made == alone  # the other suite's test module adds nothing and takes nothing away


@given(st.sampled_from(ELSEWHERE), st.sampled_from(TESTS))
def test_an_uncollected_test_module_a_footprint_holds_selects_the_tests_that_ran_it(module, test):
    footprints = {t: {"src/m0.py"} for t in TESTS} | {test: {"src/m0.py", module}}
    made = choose(TESTS, footprints, {}, [module], DEFAULT)
    assert made.everything is None and list(made.selected) == [test]


@given(st.sampled_from(["tests/b/conftest.py", "tests/b/helpers.py", "tests/b/data_test.json", "src/new.py"]))
def test_a_conftest_or_any_other_unexplained_file_still_selects_everything(path):
    made = choose(TESTS, {t: {"src/m0.py"} for t in TESTS}, {}, [path], DEFAULT)
    assert made.everything is not None and path in made.everything and not made.skipped
