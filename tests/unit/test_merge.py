"""One suite's report from its shards (``harness merge``) and before → after against the base branch's
(``--baseline``), over the real reports of docs/runs/: the naive pooling suite as the base branch's run,
the shipped one as the pull request's, each cut into two shards by test."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import split
from harness.cli import main as harness
from harness.errors import HarnessError
from harness.report import schema, summary
from harness.report.build import files, starts
from harness.report.union import merge
from tests.unit.schema_strategies import fields, of

RUNS = Path(__file__).resolve().parents[2] / "docs" / "runs"


def recorded(selection: list[str], assigned: list[list[str]], index: int) -> dict:
    """What a shard job records of its split (``harness.split.Plan.record``) for ``assigned``."""
    made = split.Plan(
        tuple(map(tuple, assigned)),
        (0.0,) * len(assigned),
        len(selection),
        split.digest(selection),
        split.digest(f"{i}\t{n}" for i, shard in enumerate(assigned) for n in shard),
    )
    return {
        **made.record(split.Shard(index, len(assigned)), {"durations": "none", "units": "file"}),
        "source": "none",
    }


def shards(name: str, tmp_path: Path, suite: str = "pooling", split_: bool = True) -> list[str]:
    """``docs/runs/<name>.json`` as two shard reports (tests alternately, each runner with its test), each
    recording its split as ``harness run --shard`` does (``split_``; reports made before it did not)."""
    report = json.loads((RUNS / f"{name}.json").read_text())
    report["suite"] = suite
    selection = [t["nodeid"] for t in report["tests"]]
    assigned = [[n for i, n in enumerate(selection) if i % 2 == index] for index in range(2)]
    paths = []
    for index in range(2):
        part = copy.deepcopy(report)
        tests = set(assigned[index])
        part["tests"] = [t for t in report["tests"] if t["nodeid"] in tests]
        part["records"] = [r for r in report["records"] if r.get("test") in tests]
        part["shard"] = f"{index}/2"
        part["splits"] = [recorded(selection, assigned, index)] if split_ else []
        path = tmp_path / f"{name}-{index}.json"
        path.write_text(json.dumps(part))
        paths.append(str(path))
    return paths


def test_shards_merged_and_compared_with_the_base_branch(tmp_path, capsys):
    base, pr = shards("pooling-naive-cpu", tmp_path), shards("pooling-cpu", tmp_path)
    assert harness(["merge", *base, "--out", str(tmp_path / "base")]) == 0
    merged = json.loads((tmp_path / "base" / "report.json").read_text())
    naive = json.loads((RUNS / "pooling-naive-cpu.json").read_text())
    assert merged["starts"]["total"]["by_kind"] == naive["starts"]["total"]["by_kind"]  # vllm 10, hf 3
    assert sorted(t["nodeid"] for t in merged["tests"]) == sorted(t["nodeid"] for t in naive["tests"])
    argv = ["merge", *pr, "--out", str(tmp_path / "pr"), "--baseline", str(tmp_path / "base")]
    assert harness([*argv, "--fail-on-regression", "starts"]) == 0
    summary = (tmp_path / "pr" / "summary.md").read_text()
    assert summary.splitlines()[2] == "accounted: 14 of 14 tests in 2 shards"
    assert "## Before → after" in summary
    suite = next(line for line in summary.splitlines() if line.startswith("| suite |"))
    assert "10 → 3 (−7)" in suite
    rows = [line for line in summary.splitlines() if line.startswith("| `")]
    assert rows[0].startswith("| `examples/pooling_naive/test_embedding_naive.py` (removed) | 10 → —")
    assert any(r.startswith("| `tests/models/pooling/test_embedding.py` (added) | — → 3") for r in rows)
    capsys.readouterr()
    reverse = ["merge", *base, "--out", str(tmp_path / "rev"), "--baseline", str(tmp_path / "pr")]
    assert harness([*reverse, "--fail-on-regression", "starts"]) == 1
    err = capsys.readouterr().err
    assert "harness: regression: runner starts rose: 5 → 13 (+8)" in err
    assert "examples/pooling_naive/test_embedding_naive.py: vLLM starts — → 10" in err


def test_a_baseline_that_cannot_be_compared_is_one_line_in_the_summary(tmp_path):
    pr = shards("pooling-cpu", tmp_path)
    other = shards("pooling-naive-cpu", tmp_path, suite="pooling-naive")
    assert harness(["merge", *other, "--out", str(tmp_path / "other")]) == 0
    (tmp_path / "corrupt.json").write_text('{"version": 1, "tests": [')
    for baseline, said in (
        (tmp_path / "other", "is of suite 'pooling-naive', this run of 'pooling': not compared"),
        (tmp_path / "missing", "no baseline at "),
        (tmp_path / "corrupt.json", "cannot be compared: "),
    ):
        assert harness(["merge", *pr, "--out", str(tmp_path / "pr"), "--baseline", str(baseline)]) == 0
        summary = (tmp_path / "pr" / "summary.md").read_text()
        assert said in summary and "| suite |" not in summary


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda r: r.update(suite="generation"), "the shards are of different suites"),
        (lambda r: r["platform"].update(name="cuda"), "the shards are of different platforms"),
        (lambda r: r["versions"].update(git_commit="abc"), "the shards are of different commits"),
        (lambda r: r.update(version=99), "report format version 99"),
        (lambda r: r.update(shard="1/3"), "the shards are of splits into 2 and 3"),
        (lambda r: r.update(shard=None, splits=[]), "shard None is not 'i/N'"),
        (lambda r: r.update(shard="3/2"), "shard '3/2' is out of range"),
        (lambda r: r.update(shard="0/2"), "shard 0/2 given twice"),
        (lambda r: r["splits"][0].update(split="0" * 16), "the shards recorded two splits"),
        (lambda r: r["splits"][0]["selection"].update(tests=99), "the shards recorded two splits"),
        (lambda r: r.update(splits=[]), "records no split, unlike the other shards"),
        (lambda r: r["splits"][0]["assigned"].pop(), "the shards' assigned tests are not their selection"),
        (lambda r: r["splits"][0].update(assigned="all"), "its recorded split is not one a shard writes"),
        (lambda r: r["splits"][0].update(selection=[]), "its recorded split is not one a shard writes"),
    ],
    ids=[
        "suites",
        "platforms",
        "commits",
        "a newer format",
        "two splits",
        "unsharded",
        "3 of 2",
        "given twice",
        "two assignments",
        "two selections",
        "unrecorded",
        "a lost assignment",
        "assigned not a list",
        "selection not an object",
    ],
)
def test_shards_that_do_not_belong_together_are_one_line_and_exit_2(tmp_path, capsys, change, said):
    """Old code: the commit check read ``versions.commit``, a field no report has (reports record
    ``git_commit``), so two commits merged; ``3/2`` merged as a shard of 2."""
    first, second = shards("pooling-cpu", tmp_path)
    report = json.loads(Path(second).read_text())
    change(report)
    Path(second).write_text(json.dumps(report))
    assert harness(["merge", first, second, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("shards_", "said"),
    [
        (["0/1", "0/1"], "shard 0/1 given twice"),
        (["0/0"], "shard '0/0' is out of range"),
        (["1/2"], "shard 0/2 of 2 missing"),
    ],
)
def test_a_shard_given_twice_missing_or_of_no_split_is_refused(tmp_path, capsys, shards_, said):
    """Old code: one report of shard ``0/0`` merged as a suite of zero shards, exit 0."""
    [path, _] = shards("pooling-cpu", tmp_path, split_=False)
    paths = []
    for number, shard in enumerate(shards_):
        report = json.loads(Path(path).read_text())
        report["shard"] = shard
        paths.append(tmp_path / f"shard-{number}.json")
        paths[-1].write_text(json.dumps(report))
    assert harness(["merge", *map(str, paths), "--out", str(tmp_path / "out")]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("lost", ["ran nowhere", "ran twice"])
def test_a_test_that_ran_nowhere_or_twice_fails_the_proof_by_name_exit_1(tmp_path, capsys, lost):
    first, second = shards("pooling-cpu", tmp_path)
    one, two = json.loads(Path(first).read_text()), json.loads(Path(second).read_text())
    moved = one["tests"][0]
    if lost == "ran twice":
        two["tests"].append(moved)
    else:
        one["tests"].pop(0)
    Path(first).write_text(json.dumps(one))
    Path(second).write_text(json.dumps(two))
    assert harness(["merge", first, second, "--out", str(tmp_path / "out")]) == 1
    tests = len(one["splits"][0]["assigned"]) + len(two["splits"][0]["assigned"])
    said = f"harness: not accounted: {tests - 1} of {tests} tests in 2 shards; {lost} 1: {moved['nodeid']}"
    assert said in capsys.readouterr().err
    merged = json.loads((tmp_path / "out" / "report.json").read_text())  # written: the proof is in it
    assert merged["accounting"]["proven"] is False
    assert merged["accounting"]["missing" if lost == "ran nowhere" else "twice"] == [moved["nodeid"]]


def test_reports_made_before_shards_recorded_their_split_merge_and_say_so(tmp_path, capsys):
    assert (
        harness(["merge", *shards("pooling-cpu", tmp_path, split_=False), "--out", str(tmp_path / "o")]) == 0
    )
    assert "accounted: not recorded (14 tests in 2 shards;" in capsys.readouterr().out


def test_harness_run_opens_its_summary_with_before_after_the_baseline(tmp_path, monkeypatch, fake_gpus):
    fake_gpus([], vendor="nvidia")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.harness.suites.s]\npaths = ["tests"]\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    assert harness(["run", "--platform", "cpu", "--out", "base", "s"]) == 0
    assert "Before → after" not in (tmp_path / "base" / "summary.md").read_text()
    monkeypatch.setenv("HARNESS_BASELINE", "base")  # the setting, as CI passes it
    assert harness(["run", "--platform", "cpu", "--out", "pr", "s"]) == 0
    summary = (tmp_path / "pr" / "summary.md").read_text().splitlines()
    assert summary[2:5] == ["## Before → after", "", "Against base."]
    assert any(line.startswith("| suite | 0 → 0 (±0) | 0 → 0 (±0) |") for line in summary)


def test_a_folder_of_shard_run_directories_is_a_baseline(tmp_path):
    """The base branch's shards as CI downloaded them (one run directory each), unmerged."""
    folder = tmp_path / "base-build"
    for index, path in enumerate(shards("pooling-naive-cpu", tmp_path)):
        (folder / f"pooling-cpu-{index}of2").mkdir(parents=True)
        Path(path).rename(folder / f"pooling-cpu-{index}of2" / "report.json")
    pr = shards("pooling-cpu", tmp_path)
    assert harness(["merge", *pr, "--out", str(tmp_path / "pr"), "--baseline", str(folder)]) == 0
    summary = (tmp_path / "pr" / "summary.md").read_text()
    assert "| suite | 10 → 3 (−7) |" in summary


def shard_reports(selection: list[str], count: int) -> list[dict]:
    """The reports of one split's ``count`` shards, each test run where the split put it."""
    made = split.plan(selection, count, {}, split.Groups())
    reports = []
    for index, assigned in enumerate(made.shards):
        record = made.record(split.Shard(index, count), {"durations": "none", "units": "file"})
        tests = [
            {"nodeid": n, "file": n.split("::")[0], "outcome": "passed", "setup_s": 0.0, "call_s": 0.1}
            for n in assigned
        ]
        reports.append(
            {
                "version": 1,
                "suite": "s",
                "shard": f"{index}/{count}",
                "platform": {"name": "cpu", "reason": "test"},
                "versions": {"git_commit": "c0ffee"},
                "phases": [],
                "tests": tests,
                "records": [],
                "findings": [],
                "splits": [{**record, "source": "none"}],
            }
        )
    return reports


NODEIDS = st.lists(
    st.builds(lambda f, t: f"t/test_{f}.py::test_{t}", st.integers(0, 6), st.integers(0, 9)),
    min_size=0,
    max_size=30,
    unique=True,
)
EDITS = st.lists(
    st.tuples(
        st.sampled_from(["drop report", "repeat report", "drop test", "copy test"]), st.integers(0, 99)
    ),
    max_size=4,
)


@settings(max_examples=400, deadline=None)
@given(selection=NODEIDS, count=st.integers(1, 6), edits=EDITS, order=st.randoms(use_true_random=False))
def test_any_permutation_duplication_or_omission_of_shard_reports_is_merged_exactly_or_refused(
    selection, count, edits, order
):
    """``merge`` of a split's shard reports, reordered, with reports repeated or left out and tests lost
    or run again: a refusal (a shard twice or missing), or a merged report whose accounting is exact: its
    tests are the selection's where it says proven, and it names exactly what ran nowhere or twice."""
    reports = shard_reports(selection, count)
    for edit, at in edits:
        if not reports:
            break
        report = reports[at % len(reports)]
        if edit == "drop report":
            reports.remove(report)
        elif edit == "repeat report":
            reports.append(copy.deepcopy(report))
        elif edit == "drop test" and report["tests"]:
            report["tests"].pop(at % len(report["tests"]))
        elif edit == "copy test" and selection:
            report["tests"].append(
                {**reports[0]["tests"][0]}
                if reports[0]["tests"]
                else {"nodeid": selection[0], "file": "t", "outcome": "passed"}
            )
    order.shuffle(reports)
    shards_ = [r["shard"] for r in reports]
    exact = sorted(shards_) == sorted(f"{i}/{count}" for i in range(count))
    if not reports:
        return
    try:
        merged = merge(copy.deepcopy(reports), [f"r{i}" for i in range(len(reports))])
    except HarnessError:
        assert not exact  # refused only where the reports are not each shard once
        return
    assert exact
    ran = [t["nodeid"] for r in reports for t in r["tests"]]
    accounting = merged["accounting"]
    assert accounting["missing"] == sorted(set(selection) - set(ran))
    assert accounting["twice"] == sorted(n for n in set(ran) if ran.count(n) > 1)
    assert accounting["proven"] == (
        not accounting["missing"] and not accounting["twice"] and not accounting["stray"]
    )
    if accounting["proven"]:
        assert sorted(t["nodeid"] for t in merged["tests"]) == sorted(selection)
        assert accounting["accounted"] == accounting["tests"] == len(selection)


def _with_retry(report: dict, nodeid: str) -> dict:
    """``report`` where ``nodeid`` passed only on its retry (the ledger's ``rerun`` event)."""
    rerun = {
        "t": 1.0, "test": nodeid, "attempt": 2, "outcome": "passed", "when": "call", "message": None,
        "longrepr": None, "first_outcome": "failed", "first_message": "boom", "first_longrepr": "boom",
        "failure_class": None, "first_failure_class": "network", "why": "network", "policy": "retry",
        "starts": 0, "started_s": 0.0, "reused": 0, "reused_s": 0.0, "result": "passed", "counts": 2,
        "verdict": "flaky", "file": nodeid.split("::")[0], "worker": None, "phase": "p",
    }  # fmt: skip
    return {**report, "reruns": [*report.get("reruns", []), rerun]}


def test_a_test_passing_only_on_a_retry_in_a_later_shard_is_not_a_plain_pass(tmp_path, capsys):
    """Its retry is the merged report's, so pass@1 says it, JUnit carries it, and the one writer wrote
    every file a run directory has."""
    selection = [f"t/test_{i}.py::test_x" for i in range(4)]
    reports = shard_reports(selection, 2)
    later = reports[1]["tests"][0]["nodeid"]
    reports[1] = _with_retry(reports[1], later)
    paths = []
    for index, report in enumerate(reports):
        tests = [{**test, "t": 1.0, "worker": None, "device": None, "phase": "p"} for test in report["tests"]]
        whole = {**report, "tests": tests, "generated": 1.0, "starts": starts([]), "files": files(tests)}
        paths.append(str(tmp_path / f"s{index}.json"))
        Path(paths[-1]).write_text(json.dumps(whole))
    assert harness(["merge", *paths, "--out", str(tmp_path / "merged")]) == 0
    merged = json.loads((tmp_path / "merged" / "report.json").read_text())
    assert [rerun["test"] for rerun in merged["reruns"]] == [later]
    assert merged["starts"]["total"]["retries"] == 1
    summary = (tmp_path / "merged" / "summary.md").read_text()
    assert "pass@1: 3 of 4 tests passed on their first try; finally 4 passed (1 only on a retry)" in summary
    written = sorted(path.name for path in (tmp_path / "merged").iterdir())
    assert written == ["junit.xml", "report.html", "report.json", "summary.md", "timeline.svg"]


TEST_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        name: of(hint)
        for name, hint in fields(schema.TestResult)[0].items()
        if name not in ("nodeid", "file")
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(selection=NODEIDS, count=st.integers(1, 4), data=st.data())
def test_merge_loses_no_per_test_field(selection, count, data):
    """Shards' reports whose tests and retries carry any fields the schema allows: the merged report holds
    each shard's every test and every retry, field for field, and its retries are counted and said."""
    reports = shard_reports(selection, count)
    for report in reports:
        for index, test in enumerate(report["tests"]):
            report["tests"][index] = {**test, **data.draw(TEST_FIELDS), "nodeid": test["nodeid"]}
        names = [test["nodeid"] for test in report["tests"]]
        if names:
            tried = data.draw(st.lists(st.sampled_from(names), max_size=3))
            report["reruns"] = [{**data.draw(of(schema.Rerun)), "test": name} for name in tried]

    def each(items):
        return sorted(json.dumps(item, sort_keys=True) for item in items)

    merged = merge(copy.deepcopy(reports), [f"r{i}" for i in range(count)])
    assert each(merged["tests"]) == each(t for r in reports for t in r["tests"])
    assert each(merged["reruns"]) == each(x for r in reports for x in r.get("reruns", []))
    retries = sum(len(r.get("reruns", [])) for r in reports)
    assert merged["starts"]["total"].get("retries", 0) == retries
    assert ("pass@1:" in summary.render(merged)) == bool(retries)
