"""Sharding: ``i/N`` parsing and Buildkite's variables, LPT from a recorded report, the hash fallback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import HarnessError, ReportError
from harness.ledger.writer import LedgerWriter
from harness.report.finalize import finalize
from harness.run.shards import assign, durations_from, parse_shard

# Seconds per test of a recorded pooling-like suite: one slow engine file, a few middling, many quick.
RECORDED = {
    "tests/models/pooling/test_embed.py": [31.0, 0.4, 0.3, 0.3],
    "tests/models/pooling/test_classify.py": [29.5, 0.8],
    "tests/models/pooling/test_rerank.py": [27.0, 1.1, 0.9],
    "tests/models/pooling/test_token_embed.py": [18.0, 0.2],
    "tests/models/pooling/test_reward.py": [16.5],
    "tests/models/pooling/test_score.py": [12.0, 3.0],
    "tests/models/pooling/test_matryoshka.py": [9.0, 0.5],
    "tests/models/pooling/test_truncation.py": [6.0, 0.5, 0.5],
    "tests/models/pooling/test_pooler_config.py": [4.0],
    "tests/models/pooling/test_normalize.py": [2.5],
}


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """A run directory written the way ``harness run`` writes one: ledger events, then ``harness report``."""
    run_dir = tmp_path / "pooling-cpu"
    writer = LedgerWriter(run_dir / "ledger" / "default", worker="gw0")
    for file, seconds in RECORDED.items():
        for number, spent in enumerate(seconds):
            # The first test's setup holds the module-scoped engine start, as pytest reports it.
            setup, call = (spent - 0.25, 0.2) if number == 0 else (0.0, spent - 0.05)
            writer.write(
                "test",
                nodeid=f"{file}::test_{number}",
                file=file,
                outcome="passed",
                setup_s=setup,
                call_s=call,
                teardown_s=0.05,
                worker="gw0",
                device=None,
                phase="default",
            )
    writer.close()
    phases = {"suite": "pooling", "platform": "cpu", "platform_reason": "test", "shard": None, "phases": []}
    (run_dir / "phases.json").write_text(json.dumps(phases))
    finalize(run_dir, env={}, publish=False)
    return run_dir


# --- parse_shard -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "expected"), [("0/1", (0, 1)), ("3/4", (3, 4)), (" 1/2 ", (1, 2))])
def test_parse_shard_reads_zero_based_index_and_count(spec, expected):
    assert parse_shard(spec, env={}) == expected


@pytest.mark.parametrize("spec", ["4/4", "1/0", "-1/2", "1", "a/b", "1/2/3", "", "1 /2x", "1/\n2"])
def test_parse_shard_rejects_bad_specs_in_one_line(spec):
    with pytest.raises(HarnessError) as caught:
        parse_shard(spec, env={})
    assert "\n" not in str(caught.value)
    assert repr(spec) in str(caught.value)


def test_parse_shard_without_spec_or_buildkite_is_unsharded():
    assert parse_shard(None, env={"BUILDKITE": "true"}) is None


def test_buildkite_parallel_job_variables_fill_the_shard():
    env = {"BUILDKITE_PARALLEL_JOB": "2", "BUILDKITE_PARALLEL_JOB_COUNT": "5"}
    assert parse_shard(None, env=env) == (2, 5)
    assert parse_shard("0/2", env=env) == (0, 2)  # an explicit --shard wins


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


# --- durations_from ----------------------------------------------------------------------------------


def test_durations_from_a_run_dir_and_its_report_agree_and_include_setup(recorded):
    durations = durations_from(recorded)
    assert durations == durations_from(recorded / "report.json")
    assert set(durations) == set(RECORDED)
    for file, seconds in RECORDED.items():
        assert durations[file] == pytest.approx(sum(seconds), abs=0.01)


@pytest.mark.parametrize(
    ("content", "says"),
    [(None, "no such report"), ("", "empty report"), ('{"version": 1, "tests": [', "truncated")],
)
def test_durations_from_a_bad_report_is_one_line(tmp_path, content, says):
    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ReportError, match=says) as caught:
        durations_from(path)
    assert "\n" not in str(caught.value)


def test_durations_from_a_report_whose_tests_lack_files_is_one_line(recorded):
    report = json.loads((recorded / "report.json").read_text())
    del report["tests"][0]["file"]
    (recorded / "report.json").write_text(json.dumps(report))
    with pytest.raises(ReportError, match=r"tests\[0\] has the wrong type") as caught:
        durations_from(recorded)
    assert "\n" not in str(caught.value)


# --- assign ------------------------------------------------------------------------------------------


def _loads(shards: list[list[str]], durations: dict[str, float]) -> list[float]:
    return [sum(durations[file] for file in shard) for shard in shards]


def test_lpt_on_a_recorded_report_puts_longest_first_on_the_lightest_shard(recorded):
    durations = durations_from(recorded)
    shards = assign(sorted(RECORDED), 2, durations)
    # LPT by hand: 32.0 30.3 29.0 18.2 16.5 15.0 9.5 7.0 4.0 2.5, each onto the lighter shard (82.7 / 81.3).
    assert [sorted(shard) for shard in shards] == [
        [
            "tests/models/pooling/test_embed.py",
            "tests/models/pooling/test_matryoshka.py",
            "tests/models/pooling/test_normalize.py",
            "tests/models/pooling/test_pooler_config.py",
            "tests/models/pooling/test_reward.py",
            "tests/models/pooling/test_token_embed.py",
        ],
        [
            "tests/models/pooling/test_classify.py",
            "tests/models/pooling/test_rerank.py",
            "tests/models/pooling/test_score.py",
            "tests/models/pooling/test_truncation.py",
        ],
    ]
    loads = _loads(shards, durations)
    assert max(loads) / (sum(loads) / len(loads)) <= 1.10


def test_lpt_keeps_each_shards_files_in_the_given_order(recorded):
    files = sorted(RECORDED, reverse=True)
    for shard in assign(files, 3, durations_from(recorded)):
        assert shard == [file for file in files if file in shard]


def test_a_file_without_history_weighs_the_median():
    durations = {"a.py": 10.0, "b.py": 2.0, "c.py": 1.0}
    # median 2.0: new.py ties b.py and goes after it in path order, so it lands on the lighter shard.
    assert assign(["a.py", "b.py", "c.py", "new.py"], 2, durations) == [["a.py"], ["b.py", "c.py", "new.py"]]
    assert assign(["a.py", "b.py", "c.py", "new.py"], 3, durations) == [
        ["a.py"],
        ["b.py", "c.py"],
        ["new.py"],
    ]


def test_equal_durations_split_by_path_order_whatever_the_input_order():
    files = [f"t{index}.py" for index in range(6)]
    durations = dict.fromkeys(files, 5.0)
    first = assign(files, 3, durations)
    assert first == [["t0.py", "t3.py"], ["t1.py", "t4.py"], ["t2.py", "t5.py"]]
    assert [sorted(s) for s in assign(list(reversed(files)), 3, durations)] == first


def test_paths_match_history_with_or_without_dot_slash():
    durations = {"tests/a.py": 100.0, "tests/b.py": 1.0, "tests/c.py": 1.0}
    assert assign(["./tests/a.py", "tests/b.py", "tests/c.py"], 2, durations) == [
        ["./tests/a.py"],
        ["tests/b.py", "tests/c.py"],
    ]


@pytest.mark.parametrize("with_history", [True, False])
@pytest.mark.parametrize("count", [1, 2, 3, 7, 40])
def test_a_file_is_never_split_or_lost(count, with_history):
    files = [f"tests/models/test_{index:02}.py" for index in range(23)]
    durations = (
        {file: float(index % 5 + 1) for index, file in enumerate(files[:15])} if with_history else None
    )
    shards = assign(files + files[:4], count, durations)  # duplicates too: still one shard per file
    assert len(shards) == count
    placed = [file for shard in shards for file in shard]
    assert sorted(placed) == sorted(files)
    if with_history and count > len(files):  # LPT fills every empty shard before doubling up
        assert sum(not shard for shard in shards) == count - len(files)


def test_zero_shards_is_an_error():
    with pytest.raises(HarnessError, match="at least 1"):
        assign(["a.py"], 0)


def test_history_of_other_files_only_falls_back_to_the_hash():
    files = [f"t{index}.py" for index in range(10)]
    assert assign(files, 3, {"gone.py": 50.0}) == assign(files, 3)


_HASHED = """
import json, sys
from harness.run.shards import assign
files = [f"tests/models/generation/test_{i}.py" for i in range(40)]
print(json.dumps(assign(files if sys.argv[1] == "forward" else files[::-1], 4)))
"""


def test_hash_sharding_is_stable_across_processes_hash_seeds_and_input_order(tmp_path):
    """Every CI job computes its slice alone: the split must not depend on Python's hash seed."""
    results = []
    for seed, order in (("1", "forward"), ("2", "backward"), ("12345", "forward")):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", _HASHED, order], env=env, capture_output=True, text=True, check=True
        )
        results.append([sorted(shard) for shard in json.loads(done.stdout)])
    assert results[0] == results[1] == results[2]
    assert all(results[0])  # 40 files over 4 shards: none empty
    # A file keeps its shard when others are added: only the hash of its own path decides.
    files = [f"tests/models/generation/test_{i}.py" for i in range(40)]
    grown = assign([*files, "tests/models/generation/test_new.py"], 4)
    assert [[f for f in shard if f in files] for shard in grown] == assign(files, 4)


def test_absolute_paths_under_the_working_directory_hash_like_relative_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = [f"tests/test_{i}.py" for i in range(12)]
    absolute = [str(tmp_path / file) for file in files]
    relative_split = assign(files, 3)
    absolute_split = assign(absolute, 3)
    assert [[str(Path(f).relative_to(tmp_path)) for f in shard] for shard in absolute_split] == relative_split


# --- through `harness run` ---------------------------------------------------------------------------

SLOW = "import time\n\n\ndef test_slow():\n    time.sleep({seconds})\n\n\ndef test_quick():\n    pass\n"


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """A tiny real suite: three test files, one of them slow, in a project of its own."""
    (tmp_path / "pyproject.toml").write_text('[tool.harness.suites.demo]\npaths = ["tests"]\n')
    (tmp_path / "tests").mkdir()
    for name, seconds in (("test_f1.py", 0.0), ("test_f2.py", 0.8), ("test_f3.py", 0.0)):
        (tmp_path / "tests" / name).write_text(SLOW.format(seconds=seconds))
    return tmp_path


FILES = ["tests/test_f1.py", "tests/test_f2.py", "tests/test_f3.py"]


def harness_run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("BUILDKITE", "HARNESS_"))}
    return subprocess.run(
        [sys.executable, "-m", "harness", "run", "--platform", "cpu", *args, "demo"],
        cwd=cwd,
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def ran_files(cwd: Path, shard: str = "") -> tuple[str | None, list[str]]:
    """The shard and files of the run in harness run's default directory (a shard's: ``-<i>of<N>``)."""
    name = f"demo-cpu-{shard.replace('/', 'of')}" if shard else "demo-cpu"
    report = json.loads((cwd / "harness-out" / name / "report.json").read_text())
    return report["shard"], sorted({test["file"] for test in report["tests"]})


def test_an_empty_shard_exits_0_and_says_so(suite):
    empty = next(index for index, shard in enumerate(assign(FILES, 4)) if not shard)
    done = harness_run(suite, "--shard", f"{empty}/4")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"shard {empty}/4 has no files" in done.stdout
    assert ran_files(suite, f"{empty}/4") == (f"{empty}/4", [])


def test_harness_run_takes_its_shard_from_buildkite(suite):
    index = next(index for index, shard in enumerate(assign(FILES, 2)) if shard)
    done = harness_run(suite, BUILDKITE_PARALLEL_JOB=str(index), BUILDKITE_PARALLEL_JOB_COUNT="2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ran_files(suite, f"{index}/2") == (f"{index}/2", sorted(assign(FILES, 2)[index]))


def test_harness_run_shards_by_the_durations_of_a_recorded_run(suite, tmp_path):
    assert harness_run(suite).returncode == 0
    recorded = tmp_path / "recorded"
    (suite / "harness-out" / "demo-cpu").rename(recorded)
    durations = durations_from(recorded)
    assert max(durations, key=durations.get) == "tests/test_f2.py"
    assert assign(FILES, 2, durations) == [["tests/test_f2.py"], ["tests/test_f1.py", "tests/test_f3.py"]]
    for index, expected in enumerate(assign(FILES, 2, durations)):
        done = harness_run(suite, "--shard", f"{index}/2", "--durations-from", str(recorded))
        assert done.returncode == 0, done.stdout + done.stderr
        assert ran_files(suite, f"{index}/2") == (f"{index}/2", expected)


def test_without_a_shard_the_previous_run_orders_tests_by_configuration(suite, tmp_path):
    assert harness_run(suite).returncode == 0
    recorded = tmp_path / "recorded"
    (suite / "harness-out" / "demo-cpu").rename(recorded)
    done = harness_run(suite, "--durations-from", str(recorded))
    assert done.returncode == 0, done.stdout + done.stderr
    written = suite / "harness-out" / "demo-cpu" / "configurations.json"
    assert json.loads(written.read_text()) == {}  # the demo suite starts no engine
    assert ran_files(suite) == (None, FILES)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--shard", "2/2"], "--shard '2/2' is out of range"),
        (["--shard", "0/2", "--durations-from", "missing.json"], "missing.json: no such report file"),
        (["--durations-from", "missing.json"], "missing.json: no such report file"),
    ],
)
def test_bad_shard_input_to_harness_run_is_one_line_exit_2(suite, args, says):
    done = harness_run(suite, *args)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("harness: error: ")
    assert says in done.stderr


def test_harness_run_names_broken_buildkite_variables(suite):
    done = harness_run(suite, BUILDKITE_PARALLEL_JOB="x", BUILDKITE_PARALLEL_JOB_COUNT="2")
    assert done.returncode == 2
    assert "BUILDKITE_PARALLEL_JOB/BUILDKITE_PARALLEL_JOB_COUNT 'x/2'" in done.stderr
