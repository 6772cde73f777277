"""Step timeouts from recorded durations (harness.ci.step_timeouts): for any durations (0, NaN, negative,
huge, none) and any bound the setting takes, a value within the bound that the harness's own parser reads
back; `harness ci buildkite --history` writes it, and the step's deadline with it; without history, the
bound."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.ci.matrix import CI_KINDS, MOST_MINUTES
from harness.ci.step_timeouts import FACTOR, LEAST_MIN, MARGIN_MIN, minutes, percentile, predicted
from harness.config.validate import check
from harness.report.build import near_timeout
from harness.report.previous import read
from tests.unit.test_ci_buildkite import cell_steps, generate, harness, project

ROOT = Path(__file__).resolve().parents[2]
SECONDS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.just(0.0),
)


@settings(max_examples=1000, deadline=None)
@given(seconds=st.lists(SECONDS, max_size=20), bound=st.integers(min_value=1, max_value=MOST_MINUTES))
def test_any_durations_give_a_bounded_value_the_parser_accepts(seconds, bound):
    value = minutes(seconds, bound)
    assert check("timeout_in_minutes", value, CI_KINDS["timeout_in_minutes"]) == value  # round-trips
    assert type(value) is int and min(LEAST_MIN, bound) <= value <= bound
    usable = [s for s in seconds if math.isfinite(s) and s >= 0]
    if not usable:
        assert value == bound  # no history: the setting's bound
    else:  # never below the slowest shard's seconds x FACTOR + the margin, unless the bound says less
        assert value == bound or value * 60 >= max(usable) * FACTOR + MARGIN_MIN * 60


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.floats(min_value=0, max_value=1e9), min_size=1, max_size=40))
def test_the_percentile_is_a_recorded_value_at_or_past_the_stated_share(values):
    found = percentile(values)
    assert found in values
    assert sum(v <= found for v in values) >= 0.95 * len(values)


def test_the_step_timeout_comes_from_the_historys_durations(tmp_path):
    """A history of 120 s and 60 s files split onto two shards: the slower shard's 120 s x 1.5 + 20 min
    = 23 min, written with the step's deadline; without history the setting's 90 (old code: always 90)."""
    tree = project(
        tmp_path, "[tool.harness.ci]\ntimeout_in_minutes = 90\nparallelism = 2\nprebuilt_image = true\n"
    )
    report = json.loads((ROOT / "docs" / "runs" / "pooling-cpu.json").read_text())
    base = {**report["tests"][0], "setup_s": 0.0, "teardown_s": 0.0}
    report["tests"] = [
        {**base, "nodeid": "tests/models/pooling/test_a.py::test_1", "call_s": 120.0},
        {**base, "nodeid": "tests/models/pooling/test_b.py::test_1", "call_s": 60.0},
    ]
    kept = tmp_path / "harness-baseline" / "pooling-cpu"
    kept.mkdir(parents=True)
    (kept / "report.json").write_text(json.dumps(report))
    assert predicted(read(kept), 2) == [120.0, 60.0]
    pipeline = generate(tree, "--platforms", "cpu", "--suites", "pooling", "--history", "harness-baseline")
    (step,) = cell_steps(pipeline)
    assert step["timeout_in_minutes"] == math.ceil(120 * FACTOR / 60 + MARGIN_MIN) == 23
    assert step["commands"][0] == "export HARNESS_CI_DEADLINE=$$(( $$(date +%s) + 1380 ))"
    assert step["env"]["HARNESS_HISTORY"] == "harness-compare/pooling-cpu:harness-baseline/pooling-cpu"
    shutil.rmtree(kept)
    (step,) = cell_steps(
        generate(tree, "--platforms", "cpu", "--suites", "pooling", "--history", "harness-baseline")
    )
    assert step["timeout_in_minutes"] == 90


def test_another_suites_report_in_a_cells_history_folder_sets_no_timeout(tmp_path):
    """Old code: any report in ``harness-baseline/pooling-cpu`` set the cell's timeout (21 minutes where
    the setting says 180); only a report of the cell's own suite and platform is its history."""
    tree = project(tmp_path, "[tool.harness.ci]\ntimeout_in_minutes = 180\nprebuilt_image = true\n")
    report = json.loads((ROOT / "docs" / "runs" / "pooling-cpu.json").read_text())
    base = {**report["tests"][0], "setup_s": 0.0, "teardown_s": 0.0}
    report["tests"] = [{**base, "nodeid": "tests/models/other/test_a.py::test_1", "call_s": 30.0}]
    kept = tmp_path / "harness-baseline" / "pooling-cpu"
    kept.mkdir(parents=True)
    for suite, platform in (("other", "cpu"), ("pooling", "cuda")):
        report = {**report, "suite": suite, "platform": {**report["platform"], "name": platform}}
        (kept / "report.json").write_text(json.dumps(report))
        args = ["--platforms", "cpu", "--suites", "pooling", "--history", "harness-baseline"]
        done = harness(tree, "ci", "buildkite", *args)
        (step,) = cell_steps(yaml.safe_load(done.stdout))
        assert step["timeout_in_minutes"] == 180, (suite, platform)
        assert f"is of suite {suite!r} on {platform!r}, this run is 'pooling' on 'cpu'" in done.stderr


def test_a_dollar_in_a_path_given_to_the_history_step_reaches_the_command_as_given(tmp_path):
    """Old code: ``--ci-settings 'ci$HOME.toml'`` was written as it is, and Buildkite's upload replaced
    ``$HOME``: the step read another file."""
    from harness.ci.buildkite import history_step
    from harness.ci.matrix import load
    from tests.unit.test_ci_buildkite import interpolate

    settings, suites = load(ci_from=None)
    made = history_step([], settings, ["--ci-settings", "ci$HOME.toml"], {})
    (command,) = [c for c in made["steps"][0]["commands"] if "pipeline upload" in c]
    assert "'ci$HOME.toml'" in interpolate(command)


def test_a_test_past_80_percent_of_its_timeout_is_a_finding():
    """Old code: no finding until the test timed out."""
    workers = [
        {"t": 0.0, "worker": "gw0", "phase": "p", "timeout": 100.0},
        {"t": 0.0, "worker": "gw1", "phase": "p"},
    ]
    base = {"t": 1.0, "file": "a.py", "device": None, "phase": "p", "setup_s": 30.0, "teardown_s": 1.0}
    tests = [
        {**base, "nodeid": "a.py::near", "worker": "gw0", "outcome": "passed", "call_s": 50.0},  # 81 s
        {**base, "nodeid": "a.py::fine", "worker": "gw0", "outcome": "failed", "call_s": 48.0},  # 79 s
        {**base, "nodeid": "a.py::skip", "worker": "gw0", "outcome": "skipped", "call_s": 90.0},
        {**base, "nodeid": "a.py::none", "worker": "gw1", "outcome": "passed", "call_s": 1e6},  # no timeout
    ]
    (found,) = near_timeout(tests, workers)  # type: ignore[arg-type]
    assert found["type"] == "near-timeout" and found["test"] == "a.py::near"
    assert (
        found["message"]
        == "a.py::near took 81 s, 81% of its 100 s timeout: a slower machine would time it out"
    )


def test_a_tests_own_timeout_from_the_history_is_the_one_it_nears():
    workers = [{"t": 0.0, "worker": "gw0", "phase": "p", "timeout": 900.0}]
    test = {"t": 1.0, "nodeid": "a.py::t", "file": "a.py", "device": None, "phase": "p", "worker": "gw0"}
    tests = [{**test, "outcome": "passed", "call_s": 70.0}]
    assert near_timeout(tests, workers) == []  # type: ignore[arg-type]
    (found,) = near_timeout(tests, workers, {"a.py::t": 80.0})  # type: ignore[arg-type]
    assert "88% of its 80 s timeout" in found["message"]
