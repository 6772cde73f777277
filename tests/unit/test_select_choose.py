"""Selection by evidence (issue 59 items 2 and 4), the pure part: which tests a change selects and why,
the rules of ``[tool.harness.select]``, and git's paths. Properties: for any footprints and changed set,
every test whose footprint meets the change is selected, engine groups stay whole, and every test is
either selected (with a reason) or named as skipped, never both, never neither."""

from __future__ import annotations

import json
from xml.etree import ElementTree

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import HarnessError
from harness.select import SELECTION, changes, rules
from harness.select.choose import choose
from harness.select.record import finished, lines, rates

FILES = [f"src/m{i}.py" for i in range(6)] + ["src/__init__.py", "data/table.csv"]
TESTS = [f"tests/test_{f}.py::test_{n}" for f in "abc" for n in range(3)]
DEFAULT = rules.load({})

pytest_plugins = ["pytester"]


def unit_of(groups: dict[str, int]):
    return lambda nodeid: str(groups.get(nodeid, nodeid))


@given(
    st.dictionaries(st.sampled_from(TESTS), st.sets(st.sampled_from(FILES[:6]), max_size=4)),
    st.lists(st.sampled_from(FILES[:6] + ["tests/test_a.py"]), max_size=4),
    st.dictionaries(st.sampled_from(TESTS), st.integers(0, 3)),
)
def test_every_test_whose_footprint_meets_the_change_runs_and_groups_stay_whole(footprints, changed, groups):
    made = choose(TESTS, footprints, {}, changed, DEFAULT, unit_of(groups))
    assert set(made.selected).isdisjoint(made.skipped)
    assert set(made.selected) | set(made.skipped) == set(TESTS)
    for test in TESTS:
        met = test not in footprints or set(footprints[test]) & set(changed) or test.split("::")[0] in changed
        if met:
            assert test in made.selected, (test, made)
    for test in made.skipped:  # a skipped test shares no group with a selected one
        group = unit_of(groups)(test)
        assert not any(unit_of(groups)(other) == group for other in made.selected)
    assert all(made.selected.values())  # each says why


@given(
    st.lists(st.sampled_from(TESTS), unique=True),
    st.sampled_from(
        [
            "conftest.py",
            "tests/conftest.py",
            "pyproject.toml",
            "noxfile.py",
            ".github/workflows/ci.yml",
            ".buildkite/pipeline.yml",
        ]
    ),
)
def test_a_global_file_selects_everything_and_says_why(footprints, changed):
    made = choose(TESTS, {t: {"src/m0.py"} for t in footprints}, {}, ["src/m1.py", changed], DEFAULT)
    assert made.skipped == ()
    assert made.everything == f"{changed} changed, and it is global"


def test_a_file_no_footprint_and_no_rule_explains_selects_everything():
    footprints = {t: {"src/m0.py"} for t in TESTS}
    made = choose(TESTS, footprints, {}, ["data/table.csv"], DEFAULT)
    assert made.skipped == () and "data/table.csv" in (made.everything or "")
    mapped = rules.load({"data/**": ["needs_data"], "docs/**": []})
    markers = {TESTS[0]: {"needs_data"}}
    made = choose(TESTS, footprints, markers, ["data/table.csv", "docs/a b/ü.md"], mapped)
    assert list(made.selected) == [TESTS[0]]
    assert made.selected[TESTS[0]] == "marker needs_data (data/table.csv changed)"
    assert made.ignored == ("docs/a b/ü.md",)


def test_an_unknown_test_a_changed_test_file_and_a_package_init_are_selected():
    footprints = {t: {"src/m0.py"} for t in TESTS[1:]}
    footprints[TESTS[5]] = {"src/m3.py"}
    made = choose(TESTS, footprints, {}, ["tests/test_b.py"], DEFAULT)
    assert made.selected[TESTS[0]] == "the history does not know it"
    assert made.selected[TESTS[3]] == "its file changed (tests/test_b.py)"
    assert TESTS[6] in made.skipped
    made = choose(TESTS, footprints, {}, ["src/__init__.py"], DEFAULT)  # ran at any import of src.*
    assert made.skipped == ()


def test_no_footprints_selects_everything_with_the_history_s_reason():
    made = choose(TESTS, "it records no footprints", {}, ["src/m0.py"], DEFAULT)
    assert made.skipped == () and made.everything == "the history cannot say: it records no footprints"


def test_paths_below_the_rootdir_are_read_from_the_repository_s_top():
    made = choose(TESTS, {t: {"src/m0.py"} for t in TESTS}, {}, ["sub/src/m0.py"], DEFAULT, prefix="sub/")
    assert made.skipped == ()
    made = choose(TESTS, {t: {"src/m0.py"} for t in TESTS}, {}, ["sub/src/m0.py"], DEFAULT)
    assert made.everything  # without the prefix the path is explained by nothing


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("conftest.py", "conftest.py", True),
        ("conftest.py", "a/b/conftest.py", True),
        ("conftest.py", "a/conftest.pyc", False),
        ("csrc/**", "csrc/a/b.cu", True),
        ("csrc/**", "src/csrc/a.cu", False),
        ("docs/", "docs/a b/ü.md", True),
        ("*.md", "x/y.md", True),
        ("src/*.py", "src/a/b.py", False),
        ("a.b", "axb", False),
    ],
)
def test_patterns(pattern, path, expected):
    assert rules.matches(pattern, path) is expected


@pytest.mark.parametrize(
    "table",
    [{"global": "x"}, {"ignore": [1]}, {"csrc/**": "gpu"}, {"packages": [""]}, {"map": []}, {"": ["x"]}],
)
def test_a_bad_select_table_is_one_line(table):
    with pytest.raises(HarnessError) as raised:
        rules.load(table)
    assert "\n" not in str(raised.value) and "[tool.harness.select]" in str(raised.value)


def test_git_s_name_status_paths_renames_deletions_spaces_and_unicode():
    output = "M\0a b.py\0R100\0old/ü.py\0new/ü.py\0D\0gone.py\0A\0tests/t é.py\0"
    assert changes.parse(output) == ["a b.py", "old/ü.py", "new/ü.py", "gone.py", "tests/t é.py"]
    assert changes.parse("") == []


def test_shadow_false_greens_are_the_failed_tests_selection_would_skip():
    made = choose(TESTS, {t: {"src/m0.py"} for t in TESTS}, {}, ["tests/test_a.py"], DEFAULT)
    from harness.select.record import section

    recorded = section("shadow", "main", "abc", ["tests/test_a.py"], made)
    outcomes = [{"nodeid": TESTS[0], "outcome": "failed"}, {"nodeid": TESTS[4], "outcome": "error"}]
    outcomes.append({"nodeid": TESTS[5], "outcome": "passed"})
    done = finished(recorded, outcomes)
    assert done["false_green"] == [TESTS[4]]
    assert finished({**recorded, "mode": "on"}, outcomes)["false_green"] is None
    assert any("false greens" in line and TESTS[4] in line for line in lines(done))
    text, missed = rates([("build 1", done), ("build 2", {**done, "false_green": []}), ("build 3", None)])
    assert missed and "false-green rate 1/2 shadow builds (50%)" in text[-1]
    assert "median selected 33%" in text[-1]


ITEMS = """
import pytest

@pytest.mark.parametrize("n", range(4))
def test_p(n):
    assert n != 2

def test_q():
    pass

class TestC:
    def test_r(self):
        pytest.skip("its own reason")
"""
IDS = [f"test_items.py::test_p[{n}]" for n in range(4)] + [
    "test_items.py::test_q",
    "test_items.py::TestC::test_r",
]
OWN = {i: "passed" for i in IDS} | {IDS[2]: "failed", IDS[5]: "skipped"}


def _outcomes(pytester, monkeypatch, mode: str | None, skipped: list[str]) -> dict[str, str]:
    """Each test's outcome in a real (in-process) session given the run's list, or none."""
    monkeypatch.delenv(SELECTION, raising=False)
    if mode is not None:
        path = pytester.path / "list.json"
        path.write_text(json.dumps({"mode": mode, "ref": "main", "skipped": skipped}))
        monkeypatch.setenv(SELECTION, str(path))
    junit = pytester.path / "junit.xml"
    pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--junitxml={junit}", "test_items.py")
    found = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        name = case.get("name")
        owner = case.get("classname", "").removeprefix("test_items").lstrip(".")
        nodeid = "::".join(["test_items.py", *([owner] if owner else []), name])
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        properties = [p.get("value") for p in case.iter("property") if p.get("name") == "harness_selection"]
        found[nodeid] = (kinds[0] if kinds else "passed", properties)
    return found


@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sets(st.sampled_from(IDS)))
def test_shadow_never_changes_an_outcome_and_on_skips_exactly_the_list(pytester, monkeypatch, skipped):
    pytester.makepyfile(test_items=ITEMS)
    words = {"passed": "passed", "failure": "failed", "error": "error", "skipped": "skipped"}
    shadow = _outcomes(pytester, monkeypatch, "shadow", sorted(skipped))
    assert {i: words[o] for i, (o, _) in shadow.items()} == OWN
    assert {i for i, (_, p) in shadow.items() if p} == skipped  # each one it would skip is marked
    on = _outcomes(pytester, monkeypatch, "on", sorted(skipped))
    assert {i: words[o] for i, (o, _) in on.items()} == {
        i: "skipped" if i in skipped else OWN[i] for i in IDS
    }
