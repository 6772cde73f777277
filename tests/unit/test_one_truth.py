"""Issue 58's seams, one fact each: a shard is the one ``Shard`` wherever merge reads it; a quarantined
test's crash is quarantined in every output; ``harness flaky`` counts a build once whether it comes merged,
as its shards, or both; failures first moves whole engine groups at every scope the split knows."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import split
from harness.pytest_plugin.order import arranged
from harness.report import flaky, store
from harness.report.marks import decode, marked
from harness.report.previous import History, scope, timeout_s
from harness.report.union import merge
from harness.run import history as past
from tests.unit.report_runs import Run
from tests.unit.test_flaky import harness_flaky
from tests.unit.test_flaky import report as flaky_report
from tests.unit.test_flaky import written as flaky_written
from tests.unit.test_merge import shard_reports

pytest_plugins = ["pytester"]

# --- the one Shard: merge reads a report's shard as Shard.parse reads it, never as a second formatter ---

SPELLED = st.sampled_from(["{i}/{n}", " {i}/{n}", "{i}/{n} ", "0{i}/{n}", "{i}/0{n}", "00{i}/{n}"])


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 4), spelling=SPELLED, data=st.data())
def test_a_shard_spelled_any_way_shard_parse_reads_merges_as_that_shard(count, spelling, data):
    """A report's ``shard`` as any spelling ``Shard.parse`` accepts: merge accepts the shards and agrees
    with their recorded splits (old code compared its own ``"i/N"`` string with the spelling as written,
    and refused ``" 0/2"`` as having "recorded the split of 0/2")."""
    selection = [f"t/test_{i}.py::test_x" for i in range(6)]
    reports = shard_reports(selection, count)
    for index, report in enumerate(reports):
        if data.draw(st.booleans()):
            report["shard"] = spelling.format(i=index, n=count)
    merged = merge(copy.deepcopy(reports), [f"r{i}" for i in range(count)])
    assert merged["accounting"]["proven"] is True
    assert [part["shard"] for part in merged["merged_from"]] == [
        str(split.Shard(i, count)) for i in range(count)
    ]


# --- a quarantined test's crash: quarantined in every output, serial and under xdist ---


def _outputs(run_dir: Path) -> tuple[dict, str, dict[str, str]]:
    """report.json's tests' outcomes and classes, summary.md, and each JUnit case's verdict tag."""
    report = json.loads((run_dir / "report.json").read_text())
    cases = {}
    for case in ET.parse(run_dir / "junit.xml").getroot().iter("testcase"):
        tags = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        classes = [p.get("value") for p in case.iter("property") if p.get("name") == "failure_class"]
        verdict = tags[0] if tags else "passed"
        cases[case.get("name", "")] = (
            f"{verdict} {classes[0]}" if len(classes) == 1 else f"{verdict} {classes}"
        )
    tests = {t["nodeid"].split("::")[-1]: (t["outcome"], t.get("failure_class")) for t in report["tests"]}
    return tests, (run_dir / "summary.md").read_text(), cases


def _said(summary_md: str, name: str) -> str:
    """Where summary.md names the test: the quarantined line, the failure table, or nowhere."""
    for line in summary_md.splitlines():
        if name in line and "quarantined tests failed without failing the run" in line:
            return "quarantined"
        if name in line and line.startswith("| `crashed` |"):
            return "gating"
    return "nowhere"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    crashes=st.lists(st.booleans(), max_size=4),
    others=st.lists(st.sampled_from(["passed", "failed", "skipped"]), max_size=3),
)
def test_every_output_reports_a_crash_as_its_crash_event_says(tmp_path_factory, crashes, others) -> None:
    """Crashes (the xdist controller's or ``harness run``'s resume's ``crash`` event, quarantined or not)
    beside other tests: report.json, JUnit and summary.md agree, a quarantined crash is skipped with its
    class and named as quarantined, never as gating; any other crash is an error named as gating."""
    run = Run(tmp_path_factory.mktemp("run")).phase("p", 0.0, 10.0)
    gw0, writer = run.worker("p", "gw0"), run.worker("p", "controller")
    for index, outcome in enumerate(others):
        gw0.test(f"tests/test_o.py::test_other{index}", outcome, t=1.0 + index)
    for index, held in enumerate(crashes):
        nodeid = f"tests/test_c.py::test_crash{index}"
        gw0.write("test-start", 5.0 + index, nodeid=nodeid, worker="gw0", phase="p")
        gw0.write("worker", 5.5 + index, worker="gw0", devices=["cpu"], mask="cpu", pid=7, phase="p")
        writer.write(
            "crash", 6.0 + index, test=nodeid, worker="gw0", how="killed by SIGKILL", quarantined=held
        )
    run.finalize()
    tests, summary_md, cases = _outputs(run.root)
    for index, held in enumerate(crashes):
        name = f"test_crash{index}"
        assert tests[name] == ("skipped" if held else "error", "crashed")
        assert cases[name] == ("skipped" if held else "error") + " crashed"  # one class, the ledger's
        assert _said(summary_md, name) == ("quarantined" if held else "gating")
    report = json.loads((run.root / "report.json").read_text())
    counted = report["phases"][0]["outcomes"]
    assert counted.get("error", 0) == sum(not held for held in crashes)


CRASHING = """
import os

def test_crash():
    os._exit(3)

def test_fine():
    pass
"""

PROJECT = """
[tool.harness]
{quarantine}
[tool.harness.suites.models]
paths = ["tests"]

[[tool.harness.suites.models.phases]]
name = "p"
workers = {workers}
"""


@pytest.mark.parametrize("workers", ['"serial"', "1"])
@pytest.mark.parametrize("held", [True, False])
def test_a_quarantined_crash_is_quarantined_in_every_output_serial_and_under_xdist(
    pytester: pytest.Pytester, fake_gpus, capsys, workers: str, held: bool
) -> None:
    """Old code: the run passed, but report.json said ``error``, summary.md named the crash among the
    failures that gate, and (serial) JUnit wrote it as an error. Not quarantined, it gates everywhere."""
    fake_gpus([], vendor="nvidia")
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_c.py").write_text(CRASHING)
    listed = 'quarantine = ["tests/test_c.py::test_crash"]' if held else ""
    (pytester.path / "pyproject.toml").write_text(PROJECT.format(quarantine=listed, workers=workers))
    from harness.cli import main as harness

    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == (0 if held else 1)
    closing = [line for line in capsys.readouterr().out.splitlines() if line.startswith("harness: 1 passed")]
    assert closing[0].startswith(f"harness: 1 passed, {0 if held else 1} failed, {1 if held else 0} skipped")
    assert ("quarantined: it does not gate" in closing[0]) == held
    tests, summary_md, cases = _outputs(pytester.path / "out")
    assert tests == {
        "test_crash": ("skipped" if held else "error", "crashed"),
        "test_fine": ("passed", None),
    }
    assert cases == {"test_crash": ("skipped" if held else "error") + " crashed", "test_fine": "passed []"}
    assert _said(summary_md, "test_crash") == ("quarantined" if held else "gating")


# --- harness flaky: a build counts once, merged, as its shards, or both ---


def _shard(build: int, index: int, count: int, outcome: str) -> dict:
    """Shard ``index`` of ``count`` of build ``build`` (each its own start), its one test ``outcome``."""
    nodeid = f"tests/t{index}.py::test_x"
    test = {"t": 1.0, "nodeid": nodeid, "file": nodeid.split("::")[0], "outcome": outcome, "phase": "p"}
    shard = flaky_report(10.0 * build + 0.1 * index, [{**test, "worker": None, "device": None}])
    return {**shard, "shard": str(split.Shard(index, count))}


BUILDS = st.lists(st.lists(st.sampled_from(["passed", "failed"]), min_size=1, max_size=3), max_size=3)


@settings(max_examples=80, deadline=None)
@given(builds=BUILDS, data=st.data())
def test_every_build_counts_once_whether_given_merged_as_its_shards_or_both(builds, data) -> None:
    """Builds given as their merged report, their shard reports, both, each possibly twice, in any order:
    ``harness flaky`` counts each shard's tries exactly once (old code: a merged report and its shards were
    different builds to it, so their tries counted twice)."""
    given, names, expected = [], [], []
    for build, outcomes in enumerate(builds):
        shards = [_shard(build, i, len(outcomes), outcome) for i, outcome in enumerate(outcomes)]
        expected += [run for shard in shards for run in flaky.runs(shard)]
        merged = merge(copy.deepcopy(shards), [f"b{build}s{i}" for i in range(len(shards))])
        form = data.draw(st.sampled_from(["merged", "shards", "both"]))
        chosen = ([merged] if form != "shards" else []) + (shards if form != "merged" else [])
        chosen += data.draw(st.lists(st.sampled_from(chosen), max_size=2))  # some given twice
        given += chosen
        names += [f"b{build}-{n}" for n in range(len(chosen))]
    order = data.draw(st.permutations(range(len(given))))
    kept = flaky.builds([given[i] for i in order], [names[i] for i in order])

    def tries(runs):
        return sorted((run.test, run.backend, run.passed) for run in runs)

    assert tries(run for report in kept for run in flaky.runs(report)) == tries(expected)


def test_harness_flaky_counts_a_merged_report_and_its_shards_once(tmp_path: Path) -> None:
    """The real commands: ``harness merge`` writes the merged report (its ``merged_from`` through the one
    loader), then ``harness flaky`` over it and its shards counts 2 tries, not 4."""
    shards = [_shard(0, 0, 2, "failed"), _shard(0, 1, 2, "passed")]
    paths = flaky_written(tmp_path, shards)
    from harness.cli import main as harness

    assert harness(["merge", *paths, "--out", str(tmp_path / "merged")]) == 0
    merged = store.load(tmp_path / "merged")
    assert [part["shard"] for part in merged["merged_from"]] == ["0/2", "1/2"]
    code, _, err = harness_flaky(str(tmp_path / "merged"), *paths)
    assert code == 0, err
    assert "1 reports (2 given twice, counted once)" in err
    assert len([run for report in flaky.builds([merged], ["m"]) for run in flaky.runs(report)]) == 2


# --- failures first moves whole engine groups at every scope the split knows ---

FOLDERS = st.sampled_from(["", "p/", "p/q/", "r/"])


@st.composite
def package_collections(draw) -> list[str]:
    """Node ids as pytest collects them, in folders: each folder's files together, each file's tests."""
    ids = draw(
        st.lists(
            st.builds(
                lambda d, f, o, n: f"{d}{f}{o}::{n}",
                FOLDERS,
                st.sampled_from(["a.py", "b.py"]),
                st.sampled_from(["", "::K"]),
                st.sampled_from(["t1", "t2"]),
            ),
            unique=True,
        )
    )
    return sorted(ids, key=lambda n: (n.split("::")[0].split("/"), n))


def _contiguous(ordered: list[str], key) -> bool:
    keys = [key(n) for n in ordered]
    return all(
        [i for i, k in enumerate(keys) if k == found]
        == list(range(keys.index(found), keys.index(found) + keys.count(found)))
        for found in set(keys)
    )


@settings(max_examples=300, deadline=None)
@given(nodeids=package_collections(), data=st.data(), count=st.integers(1, 3))
def test_failures_first_keeps_package_module_and_class_groups_whole_as_the_split_does(nodeids, data, count):
    """Package-, module- and class-scoped runners in the history: each of the split's units on one shard,
    and in each shard's failures-first order every package group (``Groups.block``), file and class whole,
    the blocks holding a failure first. Old code moved files alone: a package-scoped engine set up twice."""
    values = data.draw(st.dictionaries(st.sampled_from(nodeids or ["x"]), st.sampled_from(VALUES)))
    scopes = data.draw(st.dictionaries(st.sampled_from(nodeids or ["x"]), st.sampled_from(SCOPES)))
    groups = split.Groups({"records": [{"test": n, "scope": s} for n, s in scopes.items()]})
    made = History(seconds={n: 1.0 for n in nodeids}, groups=groups).plan(nodeids, count, files=False)
    owner = {n: i for i, shard in enumerate(made.shards) for n in shard}
    for unit in {groups.unit(n) for n in nodeids}:
        assert len({owner[n] for n in nodeids if groups.unit(n) == unit}) == 1
    handed = split.Groups.of_packages(groups.packages)  # what harness run hands the plugin
    for shard in made.shards:
        ordered = arranged(
            list(shard),
            scope,
            lambda n: decode(values.get(n)).configuration,
            lambda n: decode(values.get(n)).failed,
            [handed.block, lambda n: n.split("::")[0]],
        )
        assert sorted(ordered) == sorted(shard)
        assert _contiguous(ordered, groups.block)  # a package's tests (or a file's) together
        assert _contiguous(ordered, lambda n: n.split("::")[0])
        assert _contiguous(ordered, scope)
        failing = {groups.block(n) for n in ordered if decode(values.get(n)).failed}
        blocks = list(dict.fromkeys(groups.block(n) for n in ordered))
        assert set(blocks[: len(failing)]) == failing  # the blocks holding a failure first


VALUES = ["A", "B", marked(None), marked("A")]
SCOPES = ["package", "module", "class", "function"]


@settings(max_examples=200, deadline=None)
@given(nodeids=package_collections(), data=st.data())
def test_a_learned_limit_covers_a_wider_start_in_every_moved_package(nodeids, data):
    """Learned timeouts count a test as moved where failures first moves its block: every test of a
    package group holding a failure may now be its first, so it is given the setups' margin."""
    scopes = data.draw(st.dictionaries(st.sampled_from(nodeids or ["x"]), st.sampled_from(SCOPES)))
    failed = data.draw(st.sets(st.sampled_from(nodeids or ["x"])))
    report = {"records": [{"test": n, "scope": s} for n, s in scopes.items()]}
    history = History(
        seconds={n: 1.0 for n in nodeids},
        setup={n: 100.0 for n in nodeids},
        ran=tuple(nodeids),
        groups=split.Groups(report),
        configurations={n: marked(None) for n in failed if n in nodeids},
    )
    limits = history.timeouts(10_000.0, [nodeids])
    moved = {history.groups.block(n) for n in failed}
    for nodeid in nodeids:
        if history.groups.block(nodeid) in moved:
            assert limits[nodeid] == timeout_s(1.0 + 100.0 * min(len(nodeids), 2), 10_000.0)


PACKAGE_CONFTEST = """
import pytest

@pytest.fixture(scope="package")
def engine():
    with open("setups.txt", "a") as f:
        f.write("up\\n")
    yield
"""


def test_a_package_engine_sets_up_once_under_failures_first(pytester, monkeypatch) -> None:
    """A real session: a failure in the package's second file and one in a file outside it. Old code
    moved the two failing files first and left the package's first file after the other: its
    package-scoped fixture set up twice."""
    pytester.mkpydir("pkg")
    (pytester.path / "pkg" / "conftest.py").write_text(PACKAGE_CONFTEST)
    (pytester.path / "pkg" / "test_1.py").write_text("def test_x(engine): pass\n")
    (pytester.path / "pkg" / "test_2.py").write_text("def test_x(engine): pass\n")
    pytester.makepyfile(test_z="def test_x(): pass\n")
    history = {"pkg/test_2.py::test_x": marked(None), "test_z.py::test_x": marked(None)}
    (pytester.path / "configurations.json").write_text(json.dumps(history))
    (pytester.path / "engine-groups.json").write_text(json.dumps({"packages": ["pkg"]}))
    monkeypatch.setenv("HARNESS_CONFIGURATIONS", str(pytester.path / "configurations.json"))
    monkeypatch.setenv("HARNESS_ENGINE_GROUPS", str(pytester.path / "engine-groups.json"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--harness", "-v")
    assert result.ret == 0, result.stdout.str()[-2000:]
    ran = [line.split(" ")[0] for line in result.outlines if " PASSED" in line]
    assert ran == ["pkg/test_2.py::test_x", "pkg/test_1.py::test_x", "test_z.py::test_x"]
    assert (pytester.path / "setups.txt").read_text() == "up\n"


def test_harness_run_hands_the_historys_package_groups_to_the_order(tmp_path: Path) -> None:
    """``configurations.json`` and, where the history has package groups, ``engine-groups.json`` beside
    it, read back through the one loader; a hostile one is one usage line."""
    report = {"records": [{"test": "pkg/sub/test_1.py::test_x", "scope": "package"}], "reuses": []}
    history = History(
        source="h", configurations={"pkg/sub/test_1.py::test_x": "A"}, groups=split.Groups(report)
    )
    env: dict[str, str] = {}
    past.configurations(history, tmp_path, env)
    assert store.engine_groups(env["HARNESS_ENGINE_GROUPS"]) == {"packages": ["pkg/sub"]}
    assert split.Groups.of_packages(["pkg/sub"]).block("pkg/sub/deeper/test_9.py::t") == "package pkg/sub"
    empty: dict[str, str] = {}
    past.configurations(History(source="h", configurations={"a.py::t": "A"}), tmp_path / "none", empty)
    assert "HARNESS_ENGINE_GROUPS" not in empty
