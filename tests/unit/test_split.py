"""The shard split (harness.split, harness.pytest_plugin.shard): pytest-shard's flags balanced by recorded
durations, tests that share an engine kept together, the same split on every shard."""

from __future__ import annotations

import json
import math
import random
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import ledger, split
from harness.errors import HarnessError
from harness.ledger.writer import LedgerWriter
from harness.report.finalize import finalize
from harness.report.store import recorded
from harness.split import Shard

pytest_plugins = ["pytester"]


def tree(seed: int) -> tuple[list[str], dict[str, float], dict]:
    """Node ids shaped like vLLM's tests/models (files, some with a module- or class-scoped engine),
    their seconds, and a report.json recording which fixture started a runner."""
    rng = random.Random(seed)
    nodeids, seconds, records = [], {}, []
    for f in range(rng.randint(3, 20)):
        file = f"tests/models/test_m{f}.py"
        shape = rng.choice(["module", "class", "own"])
        for t in range(rng.randint(1, 12)):
            nodeid = f"{file}::TestX::test_{t}" if shape == "class" else f"{file}::test_{t}[{t % 3}]"
            nodeids.append(nodeid)
            if rng.random() < 0.9:
                seconds[nodeid] = rng.uniform(0.1, 60)
            if t == 0 and shape in ("module", "class"):
                records.append({"test": nodeid, "scope": shape, "fingerprint": f"{f:012x}"})
            elif shape == "own":
                records.append(
                    {
                        "test": nodeid,
                        "scope": None,
                        "fingerprint": f"{f:011x}{t % 3}",
                        "kind": "vllm",
                        "start": t,
                    }
                )
    return nodeids, seconds, {"records": records, "tests": []}


@pytest.mark.parametrize("count", range(1, 17))
def test_every_test_in_exactly_one_shard_the_same_split_everywhere_and_groups_never_split(count):
    for seed in range(5):
        nodeids, seconds, report = tree(seed)
        history = split.Groups(report)
        shards = [select(nodeids, count, index, seconds, history)[0] for index in range(count)]
        assert sorted(n for shard in shards for n in shard) == sorted(nodeids)  # exactly one shard each
        shuffled = random.Random(seed).sample(nodeids, len(nodeids))  # another job's collection order
        assert [select(shuffled, count, i, seconds, history)[0] for i in range(count)] == shards
        owner = {n: i for i, shard in enumerate(shards) for n in shard}
        for unit in {history.unit(n) for n in nodeids}:
            assert len({owner[n] for n in nodeids if history.unit(n) == unit}) == 1, unit


# what a recorded duration may say: nothing (0 s, negative, NaN, infinite, none), a real figure, a huge one
SAYS_NOTHING = [0.0, -1.0, -0.0, math.nan, math.inf, -math.inf, None]
DURATION = st.one_of(st.sampled_from([*SAYS_NOTHING, 1e300, split.LONGEST * 10]), st.floats(0.001, 1e4))


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    count=st.integers(1, 12),
    durations=st.lists(DURATION, min_size=1, max_size=6),
    junit=st.booleans(),
    shuffle=st.randoms(use_true_random=False),
)
def test_any_tree_order_n_and_durations_give_an_exact_cover_with_engine_groups_whole(
    seed, count, durations, junit, shuffle
):
    """The split's promise, for any tree, collection order, N and durations (0, negative, NaN, infinite,
    missing, huge, a test recorded twice under its node id and its JUnit key): every test in exactly one
    shard, each engine group on one shard, the same split in any order, shards within one unit of each
    other, and by test count where the seconds say nothing."""
    nodeids, _, report = tree(seed)
    seconds: dict[str, float] = {}
    for number, nodeid in enumerate(nodeids):
        value = durations[number % len(durations)]
        if value is not None:
            seconds[nodeid] = value
            if junit and number % 3 == 0:  # recorded twice: node id and JUnit key, two figures
                seconds[split.junit_key(nodeid)] = durations[(number + 1) % len(durations)] or 0.0
    history = split.Groups(report)
    made = split.plan(nodeids + nodeids[:3], count, seconds, history)  # a test listed twice
    placed = [n for shard in made.shards for n in shard]
    assert sorted(placed) == sorted(nodeids) and len(made.shards) == count
    owner = {n: i for i, shard in enumerate(made.shards) for n in shard}
    units: dict[str, list[str]] = {}
    for nodeid in nodeids:
        units.setdefault(history.unit(nodeid), []).append(nodeid)
    assert all(len({owner[n] for n in members}) == 1 for members in units.values())
    reordered = shuffle.sample(nodeids, len(nodeids))
    again = split.plan(reordered, count, seconds, history)
    assert [sorted(s) for s in again.shards] == [sorted(s) for s in made.shards]
    assert (again.digest, again.selection_digest) == (made.digest, made.selection_digest)
    assert all(math.isfinite(p) and p >= 0 for p in made.predicted)
    weight = split.weigh(nodeids, seconds)
    heaviest = max(sum(weight[n] for n in members) for members in units.values())
    assert max(made.predicted) - min(made.predicted) <= heaviest * (1 + 1e-9)  # LPT: within one unit
    if all(d is None or not (math.isfinite(d) and d > 0) for d in durations):  # seconds say nothing
        sizes = [len(shard) for shard in made.shards]
        assert max(sizes) - min(sizes) <= max(len(members) for members in units.values())


def test_zero_second_durations_split_by_test_count():
    """Old code: every unit weighed 0, the lightest shard stayed shard 0, and every file went there."""
    files = [f"t/test_{i}.py" for i in range(12)]
    for nothing in (0.0, -1.0, math.nan):
        shards = split.assign(files, 4, dict.fromkeys(files, nothing))
        assert [len(shard) for shard in shards] == [3, 3, 3, 3], nothing
    nodeids = [f"t/test_{i}.py::test" for i in range(12)]
    walls = [select(nodeids, 4, i, dict.fromkeys(nodeids, 0.0), split.Groups())[0] for i in range(4)]
    assert [len(w) for w in walls] == [3, 3, 3, 3]


def test_a_missing_duration_is_filled_by_one_rule():
    """Its file's median, else the median of all, else one second; nothing below FLOOR_S."""
    seconds = {"t/a.py::x": 10.0, "t/a.py::y": 2.0, "t/a.py::z": 4.0, "t/b.py::x": 1.0, "t/c.py::x": 0.0}
    weight = split.weigh(
        [*seconds, "t/a.py::new", "t/d.py::new", "t/b.py::neg"], {**seconds, "t/b.py::neg": -3}
    )
    assert weight["t/a.py::new"] == 4.0  # t/a.py's median
    assert weight["t/d.py::new"] == 2.0  # every record's median (10, 2, 4, 1, FLOOR_S)
    assert weight["t/b.py::neg"] == 1.0  # a negative record is no record: t/b.py's median
    assert weight["t/c.py::x"] == split.FLOOR_S
    assert split.weigh(["t/a.py::x"], {}) == {"t/a.py::x": split.DEFAULT_S}


@settings(max_examples=300, deadline=None)
@given(index=st.integers(-5, 2000), count=st.integers(-5, 2000))
def test_a_shard_is_built_only_in_range_and_reads_back_as_it_is_written(index, count):
    if 0 <= index < count <= split.MAX_SHARDS:
        shard = Shard(index, count)
        assert Shard.parse(str(shard)) == shard == Shard.of(index, count)
    else:
        for build in (lambda: Shard(index, count), lambda: Shard.parse(f"{index}/{count}")):
            with pytest.raises(HarnessError) as raised:
                build()
            assert "\n" not in str(raised.value)


def test_units_keep_a_module_or_class_engine_and_one_configuration_together():
    report = {
        "records": [
            {"test": "t/test_a.py::test_1", "scope": "module", "fingerprint": "a"},
            {"test": "t/test_b.py::TestK::test_1", "scope": "class", "fingerprint": "b"},
            {
                "test": "t/test_c.py::test_1[x]",
                "scope": "function",
                "fingerprint": "c",
                "kind": "vllm",
                "start": 1,
            },
            {"test": "t/test_c.py::test_2[x]", "scope": None, "fingerprint": "c", "kind": "vllm", "start": 2},
        ]
    }
    history = split.Groups(report)
    assert history.unit("t/test_a.py::test_9") == "file t/test_a.py"
    assert history.unit("t/test_b.py::TestK::test_2") == "class t/test_b.py::TestK"
    assert history.unit("t/test_b.py::test_free") == "test t/test_b.py::test_free"
    assert history.unit("t/test_c.py::test_2[x]") == history.unit("t/test_c.py::test_1[x]")
    assert split.Groups().unit("t/test_c.py::test_2[x]") == "file t/test_c.py"  # no report: whole files


def test_balanced_by_durations_where_they_allow():
    nodeids = [f"t/test_{i}.py::test" for i in range(40)]
    seconds = {n: float(1 + i % 7) for i, n in enumerate(nodeids)}
    walls = [select(nodeids, 4, i, seconds, split.Groups({"records": []}))[1] for i in range(4)]
    assert max(walls) / (sum(walls) / 4) <= 1.05


def test_durations_from_a_report_junit_and_pytest_splits_file(tmp_path):
    report = tmp_path / "run"  # a run directory as harness run leaves it: its ledger, then the report
    writer = LedgerWriter(report / "ledger" / "default", worker="gw0")
    writer.write(
        "test",
        nodeid="t/test_a.py::test_x",
        file="t/test_a.py",
        outcome="passed",
        setup_s=1.0,
        call_s=2.5,
        teardown_s=0.0,
        worker="gw0",
        device=None,
        phase="default",
    )
    writer.close()
    phases = {"suite": "s", "platform": "cpu", "platform_reason": "test", "shard": None, "phases": []}
    (report / "phases.json").write_text(json.dumps(phases))
    finalize(report, env={}, publish=False)
    assert recorded(report)[:2] == ({"t/test_a.py::test_x": 3.5}, "report")
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite><testcase classname="t.test_a.TestK" name="test_y[1]" time="2.0"/>'
        "</testsuite></testsuites>"
    )
    seconds, source, _ = recorded(junit)
    assert source == "junit" and seconds[split.junit_key("t/test_a.py::TestK::test_y[1]")] == 2.0
    durations = tmp_path / ".test_durations"
    durations.write_text(json.dumps({"t/test_a.py::test_x": 4}))
    assert recorded(durations)[:2] == ({"t/test_a.py::test_x": 4.0}, "test_durations")


SUITE = {
    "test_engine": """
        import pytest

        @pytest.fixture(scope="module")
        def engine():
            return object()

        def test_one(engine):
            pass

        def test_two(engine):
            pass
    """,
    "test_free": "def test_a():\n    pass\n\ndef test_b():\n    pass\n",
}


def test_pytest_shards_flags_select_each_test_once_and_an_empty_shard_passes(pytester):
    pytester.makepyfile(**{name: textwrap.dedent(source) for name, source in SUITE.items()})
    pytester.makepyprojecttoml("[tool.harness]\n")
    seen = []
    for index in range(3):
        ledger_dir = pytester.path / f"ledger{index}"
        result = pytester.runpytest_subprocess(
            "--num-shards",
            "3",
            "--shard-id",
            str(index),
            "-p",
            "no:cacheprovider",
            "-v",
            "--harness-ledger-dir",
            str(ledger_dir),
        )
        [event] = ledger.read(ledger_dir).shards
        assert (event["index"], event["count"], event["source"]) == (index, 3, "none")
        passed = [
            line.split(" ")[0] for line in result.outlines if line.endswith("PASSED") or " PASSED " in line
        ]
        seen += passed
        result.stdout.fnmatch_lines([f"harness: shard {index}/3: * tests, predicted * (durations: none*"])
        if not passed:  # two files over three shards: one is empty
            assert result.ret == 0
            result.stdout.fnmatch_lines(["harness: shard */3 is empty: nothing to run, exit 0"])
    assert sorted(seen) == sorted(
        [
            "test_engine.py::test_one",
            "test_engine.py::test_two",
            "test_free.py::test_a",
            "test_free.py::test_b",
        ]
    )


FAKE_SHARD = """
def pytest_addoption(parser):
    parser.addoption("--num-shards", type=int, default=None)
    parser.addoption("--shard-id", type=int, default=None)
"""


def test_with_pytest_shard_installed_it_keeps_its_flags_and_the_header_says_so(pytester, monkeypatch):
    """Its options are its own (the harness adds none: two would clash) and its split stands."""
    site = pytester.mkdir("site")
    (site / "fake_pytest_shard.py").write_text(FAKE_SHARD)
    info = site / "pytest_shard-0.1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pytest-shard\nVersion: 0.1.2\n")
    (info / "entry_points.txt").write_text("[pytest11]\nshard = fake_pytest_shard\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    pytester.makepyfile(**{name: textwrap.dedent(source) for name, source in SUITE.items()})
    pytester.makepyprojecttoml("[tool.harness]\n")
    result = pytester.runpytest_subprocess("--num-shards", "2", "--shard-id", "0", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["harness: pytest-shard owns --num-shards/--shard-id here*"])
    result.assert_outcomes(passed=4)  # the fake shards nothing: the harness did not split either


def test_harness_run_shard_records_its_split_in_the_report(tmp_path, monkeypatch, fake_gpus):
    """harness run --shard: the report names the shard, what the split predicted and from what."""
    from harness.cli import main as harness

    fake_gpus([], vendor="nvidia")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.harness.suites.s]\npaths = ["tests"]\n')
    (tmp_path / "tests").mkdir()
    for name in ("a", "b"):
        (tmp_path / "tests" / f"test_{name}.py").write_text("def test_x():\n    pass\n")
    assert harness(["run", "--platform", "cpu", "--out", "whole", "s"]) == 0
    assert (
        harness(
            ["run", "--platform", "cpu", "--out", "one", "--shard", "0/2", "--durations-from", "whole", "s"]
        )
        == 0
    )
    [split_] = json.loads((tmp_path / "one" / "report.json").read_text())["splits"]
    assert (split_["index"], split_["count"], split_["source"]) == (0, 2, "report whole")
    assert split_["predicted_s"] >= 0 and split_["actual_s"] >= 0
    assert harness(["run", "--platform", "cpu", "--out", "two", "--shard", "1/2", "s"]) == 0
    [split_] = json.loads((tmp_path / "two" / "report.json").read_text())["splits"]
    assert (split_["predicted_s"], split_["source"]) == (1.0, "none")  # one test, weighing DEFAULT_S
    assert split_["selection"]["tests"] == 2 and split_["tests"] == len(split_["assigned"]) == 1


@pytest.mark.parametrize("acting", [True, False])
def test_the_flags_split_whether_or_not_the_harness_acts(pytester, monkeypatch, acting):
    """Old code: installed but not acting, the harness registered --num-shards/--shard-id and ignored
    them, so every shard ran every test."""
    monkeypatch.delenv("HARNESS", raising=False)
    pytester.makepyfile(**{name: textwrap.dedent(source) for name, source in SUITE.items()})
    pytester.makepyfile(test_more="def test_c():\n    pass\n\ndef test_d():\n    pass\n")
    if acting:
        pytester.makepyprojecttoml("[tool.harness]\n")
    seen = []
    for index in range(2):
        result = pytester.runpytest_subprocess(
            "--num-shards=2", f"--shard-id={index}", "-p", "no:cacheprovider", "-v"
        )
        assert result.ret == 0
        seen += [line.split(" ")[0] for line in result.outlines if " PASSED" in line]
    assert sorted(seen) == sorted(f"{f}::{t}" for f, ts in ALL_SUITE.items() for t in ts)


ALL_SUITE = {
    "test_engine.py": ["test_one", "test_two"],
    "test_free.py": ["test_a", "test_b"],
    "test_more.py": ["test_c", "test_d"],
}


@pytest.mark.parametrize(
    ("args", "says", "acting"),
    [
        (["--shard-id", "1"], "--shard-id without --num-shards", False),
        (["--shard-id", "1"], "--shard-id without --num-shards", True),
        (["--num-shards=2"], "--num-shards without --shard-id", False),
        (["--num-shards", "2", "--shard-id", "2"], "2/2 is out of range", False),
        (["--num-shards", "2", "--shard-id", "2"], "2/2 is out of range", True),
        (["--num-shards", "0", "--shard-id", "0"], "0/0 is out of range", False),
        (["--num-shards", "-2", "--shard-id", "-1"], "-1/-2 is out of range", False),
        (["--num-shards", "100000000", "--shard-id", "0"], f"N may be at most {split.MAX_SHARDS}", True),
    ],
)
def test_a_half_pair_or_a_shard_out_of_range_is_one_line_before_any_test(
    pytester, monkeypatch, acting, args, says
):
    """Old code: a half pair ran every test (exit 0); an id out of range failed only after collection."""
    monkeypatch.delenv("HARNESS", raising=False)
    pytester.makepyfile(**{name: textwrap.dedent(source) for name, source in SUITE.items()})
    pytester.makeconftest("def pytest_collection_modifyitems(items):\n    raise SystemExit('collected')\n")
    if acting:
        pytester.makepyprojecttoml("[tool.harness]\n")
    result = pytester.runpytest_subprocess(*args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # pytest's own exit code for a usage error: 4
    [line] = [line for line in result.errlines if line.strip()]
    assert line.startswith("ERROR: ") and says in line


def test_harness_durations_as_a_separate_argument_never_moves_the_rootdir(pytester, monkeypatch):
    """Old code: pytest decides its rootdir before plugins' options exist, took the durations file
    outside the project for a test path and rooted the session at their common folder, where the
    project's [tool.harness] table is not seen (so the shard flags were ignored too)."""
    monkeypatch.delenv("HARNESS", raising=False)
    pytester.makepyprojecttoml("[tool.harness]\n")
    tests = pytester.mkdir("tests")
    (tests / "test_a.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    outside = pytester.path.parent / f"{pytester.path.name}-outside"
    outside.mkdir()
    (outside / "durations.json").write_text(json.dumps({"tests/test_a.py::test_a": 3.0}))
    monkeypatch.chdir(tests)
    spaced = pytester.runpytest_subprocess(
        "--harness-durations", str(outside / "durations.json"), "--num-shards=2", "--shard-id=0"
    )
    assert spaced.ret == pytest.ExitCode.USAGE_ERROR
    [line] = [line for line in spaced.errlines if line.strip()]
    assert f"write --harness-durations={outside / 'durations.json'}" in line
    joined = pytester.runpytest_subprocess(
        f"--harness-durations={outside / 'durations.json'}", "--num-shards=2", "--shard-id=0", "-v"
    )
    assert joined.ret == 0
    joined.stdout.fnmatch_lines([f"rootdir: {pytester.path}", "harness: shard 0/2: 2 tests, predicted 6 s*"])


def test_pytest_shard_sessions_reports_merge_with_their_accounting(pytester, monkeypatch, capsys):
    """pytest --num-shards alone (vLLM's steps), each shard's report built from its ledger: merge proves
    their tests as it does harness run's (old code: the ledger's shard event never reached the report)."""
    from harness.cli import main as harness

    monkeypatch.delenv("HARNESS", raising=False)
    pytester.makepyfile(**{name: textwrap.dedent(source) for name, source in SUITE.items()})
    pytester.makepyfile(test_more="def test_c():\n    pass\n\ndef test_d():\n    pass\n")
    pytester.makepyprojecttoml("[tool.harness]\n")
    runs = []
    for index in range(3):
        run_dir = pytester.path / f"shard-{index}"
        ledger_dir = run_dir / "ledger" / "default"
        result = pytester.runpytest_subprocess(
            "--num-shards=3",
            f"--shard-id={index}",
            "-p",
            "no:cacheprovider",
            f"--harness-ledger-dir={ledger_dir}",
        )
        assert result.ret == 0
        assert harness(["report", str(run_dir)]) == 0
        runs.append(str(run_dir))
    capsys.readouterr()
    assert harness(["merge", *runs, "--out", str(pytester.path / "merged")]) == 0
    assert "harness: accounted: 6 of 6 tests in 3 shards" in capsys.readouterr().out


def select(nodeids, count, index, seconds, groups):
    """Shard ``index`` of ``count``: its node ids and their predicted seconds (the one split)."""
    made = split.plan(nodeids, count, seconds, groups)
    return set(made.shards[index]), made.predicted[index]
