"""A run's shard (``harness.run.shards``): ``i/N`` and Buildkite's variables, pytest-shard's flags after
``--``, and the one split of the run's one collection that every phase applies, through ``harness run``
on a suite of three phases whose ``python_files`` is not pytest's default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.run.shards import flags, parse_shard
from harness.split import MAX_SHARDS, Shard

# --- parse_shard -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "expected"), [("0/1", (0, 1)), ("3/4", (3, 4)), (" 1/2 ", (1, 2))])
def test_parse_shard_reads_zero_based_index_and_count(spec, expected):
    assert parse_shard(spec, env={}) == Shard(*expected)
    assert str(parse_shard(spec, env={})) == spec.strip()


@pytest.mark.parametrize(
    "spec", ["4/4", "1/0", "0/0", "3/2", "-1/2", "1", "a/b", "1/2/3", "", "1 /2x", "1/\n2", "0/1025"]
)
def test_parse_shard_rejects_bad_specs_in_one_line(spec):
    with pytest.raises(HarnessError) as caught:
        parse_shard(spec, env={})
    assert "\n" not in str(caught.value)
    assert repr(spec) in str(caught.value)


def test_parse_shard_without_spec_or_buildkite_is_unsharded():
    assert parse_shard(None, env={"BUILDKITE": "true"}) is None


def test_buildkite_parallel_job_variables_fill_the_shard():
    env = {"BUILDKITE_PARALLEL_JOB": "2", "BUILDKITE_PARALLEL_JOB_COUNT": "5"}
    assert parse_shard(None, env=env) == Shard(2, 5)
    assert parse_shard("0/2", env=env) == Shard(0, 2)  # an explicit --shard wins


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"BUILDKITE_PARALLEL_JOB": "1"}, "BUILDKITE_PARALLEL_JOB_COUNT"),
        ({"BUILDKITE_PARALLEL_JOB_COUNT": "3"}, "BUILDKITE_PARALLEL_JOB"),
        ({"BUILDKITE_PARALLEL_JOB": "3", "BUILDKITE_PARALLEL_JOB_COUNT": "3"}, "BUILDKITE_PARALLEL_JOB"),
    ],
)
def test_broken_buildkite_variables_are_named(env, named):
    with pytest.raises(HarnessError, match=named):
        parse_shard(None, env=env)


# --- pytest-shard's flags after -- --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "shard", "kept"),
    [
        (["-v", "--num-shards", "3", "--shard-id=1", "-x"], Shard(1, 3), ["-v", "-x"]),
        (["--num-shards=3", "--shard-id=0", "--num-shards=4", "--shard-id", "3"], Shard(3, 4), []),
        (["-k", "x", "--", "--num-shards", "2"], None, ["-k", "x", "--", "--num-shards", "2"]),
        (["--shard-ids=1"], None, ["--shard-ids=1"]),  # pytest allows no abbreviation, and this is another
    ],
)
def test_pytest_shard_flags_after_dashes_are_the_runs_shard_and_leave_the_phases(args, shard, kept):
    assert flags(args) == (shard, None, kept)


def test_harness_durations_after_dashes_weigh_the_runs_split_and_reach_no_pytest():
    """Given to a phase's pytest as ``--harness-durations PATH``, PATH would be a test path to pytest's
    rootdir search (a file outside the project moves the rootdir): the run takes it for its split."""
    args = ["-v", "--harness-durations", "/elsewhere/.test_durations", "--num-shards=2", "--shard-id=1"]
    assert flags(args) == (Shard(1, 2), "/elsewhere/.test_durations", ["-v"])
    assert flags(["--harness-durations=d.json"]) == (None, "d.json", [])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--shard-id", "1"], "--shard-id without --num-shards"),
        (["--num-shards=2"], "--num-shards without --shard-id"),
        (["--num-shards", "2", "--shard-id", "2"], "2/2 is out of range"),
        (["--num-shards", "0", "--shard-id", "0"], "0/0 is out of range"),
        (["--num-shards", str(MAX_SHARDS + 1), "--shard-id", "0"], f"N may be at most {MAX_SHARDS}"),
        (["--num-shards", "two", "--shard-id", "0"], "expected a whole number"),
        (["--num-shards", "2", "--shard-id"], "expected a whole number"),
        (["--num-shards", "2", "--shard-id=-1"], "expected a whole number"),
    ],
)
def test_a_half_pair_or_a_shard_out_of_range_is_one_line(args, says):
    with pytest.raises(HarnessError) as caught:
        flags(args)
    assert "\n" not in str(caught.value) and says in str(caught.value)


# --- through `harness run` ---------------------------------------------------------------------------

# Three phases (shared-engine, standalone, multi-gpu) and a python_files that is not pytest's default:
# check_*.py. The run's split must come from what pytest collects, and every phase must apply it.
PYPROJECT = """
[tool.pytest.ini_options]
python_files = ["check_*.py"]
markers = ["standalone: builds its own runners"]

[tool.harness.suites.demo]
paths = ["checks"]
"""
FILES = {
    "check_engine.py": """
        import pytest

        @pytest.fixture(scope="module")
        def engine():
            return object()

        @pytest.mark.parametrize("x", range(5))
        def test_shared(engine, x):
            pass
    """,
    "check_own.py": """
        import pytest

        @pytest.mark.standalone
        def test_own():
            pass
    """,
    "check_two.py": """
        import pytest

        @pytest.mark.gpus(2)
        def test_two():
            pass
    """,
    "sub/check_class.py": """
        class TestK:
            def test_1(self):
                pass

            def test_2(self):
                pass
    """,
    "test_not_collected.py": "def test_never():\n    pass\n",  # pytest's default name: not this suite's
}
ALL = sorted(
    [f"checks/check_engine.py::test_shared[{x}]" for x in range(5)]
    + ["checks/check_own.py::test_own", "checks/check_two.py::test_two"]
    + ["checks/sub/check_class.py::TestK::test_1", "checks/sub/check_class.py::TestK::test_2"]
)


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """A tiny real suite of three phases, in a project of its own, with a custom python_files."""
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    for name, source in FILES.items():
        path = tmp_path / "checks" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return tmp_path


def harness(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("BUILDKITE", "HARNESS_"))}
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd,
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def harness_run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return harness(cwd, "run", "--platform", "cpu", *args, **env)


def ran(out: Path) -> list[str]:
    """The node ids a run directory's report has a result for."""
    return sorted(test["nodeid"] for test in json.loads((out / "report.json").read_text())["tests"])


@pytest.mark.parametrize("form", ["--shard", "pytest-shard's flags"])
def test_every_test_of_the_suite_runs_in_one_shard_and_merge_accounts_for_all(suite, form):
    """Old code: with a custom python_files every --shard job ran nothing (the split globbed test_*.py);
    with --num-shards each phase's pytest split its own tests again, unlike the run's collection, so
    the standalone and multi-gpu tests ran in no shard."""
    count, runs = 2, []
    for index in range(count):
        out = suite / f"out-{index}"
        shard = ["--shard", f"{index}/{count}"] if form == "--shard" else []
        after = [] if shard else ["--", "--num-shards", str(count), "--shard-id", str(index)]
        done = harness_run(suite, "--out", out.name, *shard, "demo", *after)
        assert done.returncode == 0, done.stdout + done.stderr
        runs.append((out, done.stdout))
    together = [nodeid for out, _ in runs for nodeid in ran(out)]
    assert sorted(together) == ALL  # each once, none lost
    for index, (out, said) in enumerate(runs):
        tests = len(ran(out))
        assert f"harness: accounted: {tests} of {tests} tests in shard {index}/{count}" in said
    outs = [out for out, _ in runs]
    merged = harness(suite, "merge", *map(str, outs), "--out", "merged")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert f"harness: accounted: {len(ALL)} of {len(ALL)} tests in {count} shards" in merged.stdout
    report = json.loads((suite / "merged" / "report.json").read_text())
    assert report["accounting"]["proven"] is True and report["accounting"]["tests"] == len(ALL)
    assert (suite / "merged" / "summary.md").read_text().splitlines()[2].startswith("accounted: 9 of 9")


def test_both_forms_give_one_split_and_a_shard_records_what_it_was_computed_from(suite):
    by_flag = harness_run(suite, "--out", "flags", "demo", "--", "--num-shards=3", "--shard-id=2")
    by_shard = harness_run(suite, "--out", "shard", "--shard", "2/3", "demo")
    assert by_flag.returncode == by_shard.returncode == 0, by_flag.stderr + by_shard.stderr
    records = [json.loads((suite / o / "report.json").read_text())["splits"] for o in ("flags", "shard")]
    [flagged], [record] = records
    assert flagged["split"] == record["split"]  # one split, whichever form asked
    assert record["selection"]["tests"] == len(ALL) and len(record["selection"]["digest"]) == 16
    assert (record["index"], record["count"], record["inputs"]) == (
        2,
        3,
        {"durations": "none", "units": "file"},
    )
    assert sorted(record["assigned"]) == ran(suite / "shard")
    assert ran(suite / "flags") == ran(suite / "shard")  # the same tests, whichever form asked


def test_the_split_weighs_whole_files_by_a_recorded_run(suite, tmp_path):
    assert harness_run(suite, "--out", str(tmp_path / "recorded"), "demo").returncode == 0
    recorded = tmp_path / "recorded" / "report.json"  # the class's first test took 60 s there
    report = json.loads(recorded.read_text())
    for test in report["tests"]:
        if test["nodeid"] == "checks/sub/check_class.py::TestK::test_1":
            test["call_s"] = 60.0
    recorded.write_text(json.dumps(report))
    for index in range(2):
        out = suite / f"out-{index}"
        done = harness_run(
            suite,
            "--out",
            out.name,
            "--shard",
            f"{index}/2",
            "--durations-from",
            str(tmp_path / "recorded"),
            "demo",
        )
        assert done.returncode == 0, done.stdout + done.stderr
    # the slow class's file (60 s) first, alone on shard 0; the rest, far less together, on shard 1
    assert ran(suite / "out-0") == [t for t in ALL if "check_class" in t]
    assert sorted(ran(suite / "out-0") + ran(suite / "out-1")) == ALL


def test_a_shard_of_a_suite_that_does_not_collect_fails_showing_why_and_runs_nothing(suite):
    """No selection, no split: each phase shows pytest's collection error (--collect-only), exit 1."""
    (suite / "checks" / "check_broken.py").write_text("import a_module_that_is_not_there\n")
    done = harness_run(suite, "--out", "out", "--shard", "0/2", "demo")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ERROR collecting checks/check_broken.py" in done.stdout
    assert ran(suite / "out") == []


def test_an_empty_shard_exits_0_and_says_so(suite):
    done = harness_run(suite, "--shard", "4/5", "demo")  # four files over five shards: the last is empty
    assert done.returncode == 0, done.stdout + done.stderr
    assert "shard 4/5 has no tests for phase shared-engine" in done.stdout
    assert "harness: accounted: 0 of 0 tests in shard 4/5" in done.stdout


def test_harness_run_takes_its_shard_from_buildkite(suite):
    done = harness_run(suite, "demo", BUILDKITE_PARALLEL_JOB="1", BUILDKITE_PARALLEL_JOB_COUNT="2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((suite / "harness-out" / "demo-cpu-1of2" / "report.json").read_text())["shard"] == "1/2"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--shard", "2/2", "demo"], "--shard '2/2' is out of range"),
        (["--shard", "0/2", "--durations-from", "missing.json", "demo"], "missing.json: no such report file"),
        (["--durations-from", "missing.json", "demo"], "missing.json: no such report file"),
        (["demo", "--", "--shard-id", "1"], "--shard-id without --num-shards"),
        (["demo", "--", "--num-shards", "2", "--shard-id", "2"], "2/2 is out of range"),
        (["demo", "--", "--num-shards", "5000", "--shard-id", "0"], f"N may be at most {MAX_SHARDS}"),
        (["--shard", "0/2", "demo", "--", "--num-shards=2", "--shard-id=1"], "ask for different shards"),
    ],
)
def test_bad_shard_input_to_harness_run_is_one_line_exit_2(suite, args, says):
    """Old code: a half pair after -- ran every test in every job; an id out of range ran none."""
    done = harness_run(suite, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("harness: error: ") and says in line


def test_harness_run_names_broken_buildkite_variables(suite):
    done = harness_run(suite, "demo", BUILDKITE_PARALLEL_JOB="x", BUILDKITE_PARALLEL_JOB_COUNT="2")
    assert done.returncode == 2
    assert "BUILDKITE_PARALLEL_JOB/BUILDKITE_PARALLEL_JOB_COUNT 'x/2'" in done.stderr
