"""Selection in the generated CI (issue 59 item 4): every test step carries ``HARNESS_SELECT`` from
``[tool.harness.ci] select`` ("shadow" by default, "on", or "off"), and ``harness run`` reads it back from the
parsed YAML as a pull request's selection (shadow or for real) and as a branch build's run of everything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness import cli
from harness.run.selecting import arm_footprints, asked

ROOT = Path(__file__).resolve().parents[2]
SUITES = '[tool.harness.suites.pooling]\npaths = ["tests"]\n'
PULL_REQUEST = {"BUILDKITE_PULL_REQUEST": "7", "BUILDKITE_PULL_REQUEST_BASE_BRANCH": "main"}
GITHUB_PULL_REQUEST = {"GITHUB_BASE_REF": "main"}


def _project(root: Path, ci: str) -> None:
    (root / "pyproject.toml").write_text(f"{SUITES}[tool.harness.ci]\nplatforms = ['cpu', 'cuda']\n{ci}\n")


def _generated(tmp_path, monkeypatch, capsys, ci: str, *argv: str) -> str:
    _project(tmp_path, ci)
    monkeypatch.chdir(tmp_path)
    assert cli.main(list(argv)) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("ci", "mode"),
    [("", "shadow"), ('select = "shadow"', "shadow"), ('select = "on"', "on"), ('select = "off"', "off")],
)
def test_every_buildkite_test_step_carries_the_mode_and_harness_run_reads_it_back(
    tmp_path, monkeypatch, capsys, ci, mode
):
    """Old code: no step carried HARNESS_SELECT (the pipeline had to set it itself), and ``select`` was
    an unknown key (exit 2). ``on`` and ``off`` unquoted are YAML 1.1's booleans: the value must come back a
    string. ``off``: a pull request's build runs everything and records no footprints."""
    text = _generated(tmp_path, monkeypatch, capsys, ci, "ci", "buildkite")
    steps = yaml.safe_load(text)["steps"]
    tests = [step for step in steps if "HARNESS_HISTORY" in step.get("env", {})]
    assert len(tests) == 2  # cpu and cuda, each cell's test step (the merge steps run no test)
    for step in tests:
        value = step["env"]["HARNESS_SELECT"]
        assert value == mode and isinstance(value, str)
        # a pull request's build selects since its base branch; shadow runs everything and records
        selects = ("origin/main", mode == "shadow") if mode != "off" else (None, False)
        assert asked(None, False, {**step["env"], **PULL_REQUEST}) == selects
        env = {**step["env"], **PULL_REQUEST}
        arm_footprints(env, *asked(None, False, env))
        assert (env.get("HARNESS_FOOTPRINTS") == "1") is (mode != "off")
        # a build of a branch (the default one refreshes the kept footprints) runs every test
        assert asked(None, False, {**step["env"], "BUILDKITE_PULL_REQUEST": "false"}) == (None, False)
    for step in steps:
        if "HARNESS_HISTORY" not in step.get("env", {}):
            assert "HARNESS_SELECT" not in step.get("env", {})


@pytest.mark.parametrize(("ci", "mode"), [("", "shadow"), ('select = "on"', "on")])
def test_every_github_row_carries_the_mode_and_the_workflow_passes_it(
    tmp_path, monkeypatch, capsys, ci, mode
):
    rows = json.loads(_generated(tmp_path, monkeypatch, capsys, ci, "ci", "matrix", "--format", "github"))
    assert {row["select"] for row in rows["include"]} == {mode}
    workflow = yaml.safe_load((ROOT / "ci/github/harness.yml").read_text())
    steps = workflow["jobs"]["test"]["steps"]
    (run,) = [step for step in steps if step.get("name", "").startswith("nox -s")]
    assert run["env"]["HARNESS_SELECT"] == "${{ matrix.select }}"
    (checkout,) = [step for step in steps if step.get("uses", "").startswith("actions/checkout@")]
    assert checkout["with"]["fetch-depth"] == 0  # the merge base with origin/<base branch> is there
    env = {"HARNESS_SELECT": rows["include"][0]["select"], **GITHUB_PULL_REQUEST}
    assert asked(None, False, env) == ("origin/main", mode == "shadow")


@pytest.mark.parametrize("value", ['"OFF"', '"ON"', '""', "true", "1", '["on"]'])
def test_another_select_value_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, value):
    _project(tmp_path, f"select = {value}")
    monkeypatch.chdir(tmp_path)
    for argv in (["ci", "buildkite"], ["ci", "matrix"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "select" in err and "Traceback" not in err


def test_an_empty_variable_is_unset_as_a_ci_system_leaves_it():
    """``HARNESS_SELECT=`` (a pipeline's variable defined empty) selects nothing and refuses nothing."""
    assert asked(None, False, {"HARNESS_SELECT": "", **PULL_REQUEST}) == (None, False)
