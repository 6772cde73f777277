"""The shard split (harness.split, harness.pytest_plugin.shard): pytest-shard's flags balanced by recorded
durations, tests that share an engine kept together, the same split on every shard."""

from __future__ import annotations

import json
import random
import textwrap

import pytest

from harness import ledger, split
from harness.errors import HarnessError
from harness.pytest_plugin.shard import select

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
                records.append({"test": nodeid, "scope": None, "fingerprint": f"{f:011x}{t % 3}"})
    return nodeids, seconds, {"records": records, "tests": []}


@pytest.mark.parametrize("count", range(1, 17))
def test_every_test_in_exactly_one_shard_the_same_split_everywhere_and_groups_never_split(count):
    for seed in range(5):
        nodeids, seconds, report = tree(seed)
        history = split.History(report)
        shards = [select(nodeids, count, index, seconds, history)[0] for index in range(count)]
        assert sorted(n for shard in shards for n in shard) == sorted(nodeids)  # exactly one shard each
        shuffled = random.Random(seed).sample(nodeids, len(nodeids))  # another job's collection order
        assert [select(shuffled, count, i, seconds, history)[0] for i in range(count)] == shards
        owner = {n: i for i, shard in enumerate(shards) for n in shard}
        for unit in {history.unit(n) for n in nodeids}:
            assert len({owner[n] for n in nodeids if history.unit(n) == unit}) == 1, unit


def test_units_keep_a_module_or_class_engine_and_one_configuration_together():
    report = {
        "records": [
            {"test": "t/test_a.py::test_1", "scope": "module", "fingerprint": "a"},
            {"test": "t/test_b.py::TestK::test_1", "scope": "class", "fingerprint": "b"},
            {"test": "t/test_c.py::test_1[x]", "scope": "function", "fingerprint": "c"},
            {"test": "t/test_c.py::test_2[x]", "scope": None, "fingerprint": "c"},
        ]
    }
    history = split.History(report)
    assert history.unit("t/test_a.py::test_9") == "file t/test_a.py"
    assert history.unit("t/test_b.py::TestK::test_2") == "class t/test_b.py::TestK"
    assert history.unit("t/test_b.py::test_free") == "test t/test_b.py::test_free"
    assert history.unit("t/test_c.py::test_2[x]") == history.unit("t/test_c.py::test_1[x]")
    assert split.History().unit("t/test_c.py::test_2[x]") == "file t/test_c.py"  # no report: whole files


def test_balanced_by_durations_where_they_allow():
    nodeids = [f"t/test_{i}.py::test" for i in range(40)]
    seconds = {n: float(1 + i % 7) for i, n in enumerate(nodeids)}
    walls = [select(nodeids, 4, i, seconds, split.History({"records": []}))[1] for i in range(4)]
    assert max(walls) / (sum(walls) / 4) <= 1.05


def test_durations_from_a_report_junit_and_pytest_splits_file(tmp_path):
    report = tmp_path / "run"
    report.mkdir()
    (report / "report.json").write_text(
        json.dumps(
            {"tests": [{"nodeid": "t/test_a.py::test_x", "setup_s": 1, "call_s": 2.5, "teardown_s": None}]}
        )
    )
    assert split.test_seconds(report) == ({"t/test_a.py::test_x": 3.5}, "report")
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite><testcase classname="t.test_a.TestK" name="test_y[1]" time="2.0"/>'
        "</testsuite></testsuites>"
    )
    seconds, source = split.test_seconds(junit)
    assert source == "junit" and seconds[split.junit_key("t/test_a.py::TestK::test_y[1]")] == 2.0
    durations = tmp_path / ".test_durations"
    durations.write_text(json.dumps({"t/test_a.py::test_x": 4}))
    assert split.test_seconds(durations) == ({"t/test_a.py::test_x": 4.0}, "test_durations")


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[1, 2]",
        '{"t.py::x": "soon"}',
        '{"t.py::x": 1e400}',
        '{"tests": [{"call_s": 1}]}',
        '<testsuite><testcase name="x" time="abc"/></testsuite>',
        "<testsuite><unclosed></testsuite>",
    ],
)
def test_a_bad_durations_file_is_one_line(tmp_path, content):
    path = tmp_path / "durations"
    path.write_text(content)
    with pytest.raises(HarnessError) as raised:
        split.test_seconds(path)
    assert "\n" not in str(raised.value) and str(path) in str(raised.value)


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
    assert (split_["predicted_s"], split_["source"]) == (None, "hash of the file paths")
