"""Bad input, as an attacker or a tired user gives it: every case is one line on stderr and exit 2.

CLI arguments, ``[tool.harness]`` tables, environment overrides, report, phases and ledger files, and
device masks, each through the real ``harness`` entry point (``harness.cli.main``) in a project directory.
1 would read as "regression" to CI, and a traceback is never an answer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main as harness
from harness.run import directory
from tests.fakes import gpu

GIB = 2**30
SUITE = """
[tool.harness.suites.models]
paths = ["tests"]
"""
PHASE = """
[tool.harness.suites.models]
paths = ["tests"]
[[tool.harness.suites.models.phases]]
{}
"""


def _report(**changes) -> dict:
    """A minimal report ``load`` accepts, with ``changes`` applied (dotted keys reach into it)."""
    tally = {"starts": 0, "failed": 0, "startup_s": 0.0, "by_kind": {}}
    report = {
        "version": 1,
        "generated": 1.0,
        "suite": "models",
        "platform": {"name": "cpu", "reason": None},
        "phases": [{"name": "p", "wall_s": 1.0, "outcomes": {"passed": 1}}],
        "tests": [
            {
                "t": 1.0,
                "nodeid": "t.py::a",
                "file": "t.py",
                "outcome": "passed",
                "call_s": 1.0,
                "worker": "main",
                "device": "cpu",
                "phase": "p",
            }
        ],
        "records": [],
        "starts": {"total": tally, "by_phase": {}, "by_file": {}, "by_kind": {}},
        "files": {"t.py": {"tests": 1, "outcomes": {"passed": 1}, "wall_s": 1.0}},
    }
    for key, value in changes.items():
        *path, last = key.split("__")
        target = report
        for part in path:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[last] = value
    return report


@pytest.fixture
def project(tmp_path, monkeypatch, fake_gpus):
    """A project directory with a ``models`` suite on a CPU machine; returns its path."""
    fake_gpus([], vendor="nvidia")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text(SUITE)
    (tmp_path / "good.json").write_text(json.dumps(_report()))
    return tmp_path


def one_line_exit_2(capsys, argv: list[str]) -> str:
    code = harness(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("harness: error: "), err
    assert "Traceback" not in err
    return err


CLI = {
    "no command": [],
    "run without a suite": ["run"],
    "unknown platform": ["run", "models", "--platform", "tpu"],
    "unknown option": ["run", "models", "--bogus"],
    "unknown suite": ["run", "--platform", "cpu", "nope"],
    "unknown phase": ["run", "--platform", "cpu", "--phase", "nope", "models"],
    "NUL in a phase": ["run", "--platform", "cpu", "--phase", "a\0b", "models"],
    "shard without N": ["run", "--platform", "cpu", "--shard", "1", "models"],
    "shard past N": ["run", "--platform", "cpu", "--shard", "2/2", "models"],
    "shard of 0": ["run", "--platform", "cpu", "--shard", "0/0", "models"],
    "negative shard": ["run", "--platform", "cpu", "--shard", "-1/2", "models"],
    "huge shard count": ["run", "--platform", "cpu", "--shard", "0/99999999999999999999", "models"],
    "shard count over the cap": ["run", "--platform", "cpu", "--shard", "0/5000", "models"],
    "fullwidth shard index": ["run", "--platform", "cpu", "--shard", "\uff10/2", "models"],
    "arabic-indic shard count": ["run", "--platform", "cpu", "--shard", "0/\u0662", "models"],
    "durations file missing": [
        "run",
        "--platform",
        "cpu",
        "--shard",
        "0/2",
        "--durations-from",
        "no.json",
        "models",
    ],
    "-m pytest rejects": ["run", "--platform", "cpu", "models", "--", "-m", "a,b"],
    "-k pytest rejects, clustered": ["run", "--platform", "cpu", "models", "--", "-vk", "test=1"],
    "-m= pytest rejects": ["run", "--platform", "cpu", "models", "--", "-m=a b"],
    "ledger dir through pytest args": ["run", "--platform", "cpu", "models", "--", "--harness-ledger-dir=x"],
    "junitxml through pytest args": ["run", "--platform", "cpu", "models", "--", "--junitxml", "j.xml"],
    "no-harness through pytest args": ["run", "--platform", "cpu", "models", "--", "--no-harness"],
    "-p no:harness through pytest args": ["run", "--platform", "cpu", "models", "--", "-p", "no:harness"],
    "-pno:harness through pytest args": ["run", "--platform", "cpu", "models", "--", "-pno:harness"],
    "out is a file": ["run", "--platform", "cpu", "--out", "good.json", "models"],
    "NUL in out": ["run", "--platform", "cpu", "--out", "a\0b", "models"],
    "report of a missing dir": ["report", "missing"],
    "report of an empty dir": ["report", "tests"],
    "compare missing files": ["compare", "no1.json", "no2.json"],
    "compare a device file": ["compare", "/dev/zero", "good.json"],
    "compare a directory without a report": ["compare", "tests", "good.json"],
    "compare, bad gate": ["compare", "good.json", "good.json", "--fail-on-regression", "wall:abc"],
    "compare, fullwidth gate": [
        "compare",
        "good.json",
        "good.json",
        "--fail-on-regression",
        "wall:\uff11\uff10%",
    ],
    "compare, unknown format": ["compare", "good.json", "good.json", "--format", "xml"],
    "ci, duplicate platforms": ["ci", "buildkite", "--platforms", "cpu,cpu"],
    "ci, duplicate suites": ["ci", "matrix", "--suites", "models,models"],
    "ci, unknown platform": ["ci", "matrix", "--platforms", "tpu"],
    "ci, empty platform": ["ci", "matrix", "--platforms", "cpu,"],
    "ci, unknown suite": ["ci", "matrix", "--suites", "nope"],
    "ci, no subcommand": ["ci"],
    "doctor, unknown option": ["doctor", "--bogus"],
}


@pytest.mark.parametrize("argv", CLI.values(), ids=CLI.keys())
def test_cli_arguments(project, capsys, argv):
    one_line_exit_2(capsys, argv)


CONFIG = {
    "phase_timeout_s = 0": "[tool.harness]\nphase_timeout_s = 0\n",
    "phase_timeout_s = nan": "[tool.harness]\nphase_timeout_s = nan\n",
    "phase_timeout_s = inf": "[tool.harness]\nphase_timeout_s = inf\n",
    "phase_timeout_s < 0": "[tool.harness]\nphase_timeout_s = -1\n",
    "test_timeout_s a string": '[tool.harness]\ntest_timeout_s = "x"\n',
    "test_timeout_s = 1e20": "[tool.harness]\ntest_timeout_s = 1e20\n",
    "phase_timeout_s = 1e20": "[tool.harness]\nphase_timeout_s = 1e20\n",
    "unknown key": "[tool.harness]\nsetle = true\n",
    "settle_ratio > 1": "[tool.harness]\nsettle_ratio = 2\n",
    "platform key not a table": "[tool.harness]\ncpu = 1\n",
    "cpu_workers 0": "[tool.harness]\ncpu_workers = 0\n",
    "phase named .": PHASE.format('name = "."'),
    "phase named ..": PHASE.format('name = ".."'),
    "phase name with NUL": PHASE.format('name = "a\\u0000b"'),
    "phase name with /": PHASE.format('name = "a/b"'),
    "phase name with +": PHASE.format('name = "a+b"'),
    "phase name of 101 chars": PHASE.format(f'name = "{"a" * 101}"'),
    "markers 'not ('": PHASE.format('name = "p"\nmarkers = "not ("'),
    "keywords 'a and'": PHASE.format('name = "p"\nkeywords = "a and"'),
    "markers ')'": PHASE.format('name = "p"\nmarkers = "a)"'),
    "markers empty": PHASE.format('name = "p"\nmarkers = " "'),
    "path starting with -": PHASE.format('name = "p"\npaths = ["-x"]'),
    "empty paths": PHASE.format('name = "p"\npaths = []'),
    "phase timeout nan": PHASE.format('name = "p"\ntimeout_s = nan'),
    "phase timeout inf": PHASE.format('name = "p"\ntimeout_s = inf'),
    "phase timeout 0": PHASE.format('name = "p"\ntimeout_s = 0'),
    "phase timeout bool": PHASE.format('name = "p"\ntimeout_s = true'),
    "phase workers 10**9": PHASE.format('name = "p"\nworkers = 1000000000'),
    "cpu_workers 10**9": "[tool.harness]\ncpu_workers = 1000000000\n",
    "workers_per_gpu 10**9": "[tool.harness]\nworkers_per_gpu = 1000000000\n",
    "memory_sample_s 1e-9": "[tool.harness]\nmemory_sample_s = 1e-9\n",
    "reuse_engines negative": "[tool.harness]\nreuse_engines = -1\n",
    "reuse_engines a list": "[tool.harness]\nreuse_engines = [1]\n",
    "a list where a number belongs": "[tool.harness]\ntest_timeout_s = [1]\n",
    "[tool] not a table": "tool = 1\n",
    "a path that does not exist": PHASE.format('name = "p"\npaths = ["nope"]'),
    "a path outside the project": PHASE.format('name = "p"\npaths = ["tests/../.."]'),
    "an absolute path outside": PHASE.format('name = "p"\npaths = ["/etc"]'),
    "a path pytest reads as an arguments file": PHASE.format('name = "p"\npaths = ["@tests"]'),
    "markers pytest rejects": PHASE.format('name = "p"\nmarkers = "a,b"'),
    "keywords pytest rejects": PHASE.format('name = "p"\nkeywords = "test=1"'),
    "workers many": PHASE.format('name = "p"\nworkers = "many"'),
    "dist each": PHASE.format('name = "p"\ndist = "each"'),
    "unknown phase key": PHASE.format('name = "p"\ncolour = "red"'),
    "invalid TOML": "[tool.harness\n",
    "suites not tables": "[tool.harness]\nsuites = 1\n",
    "ci platforms twice": SUITE + '[tool.harness.ci]\nplatforms = ["cpu", "cpu"]\n',
    "ci parallelism 0": SUITE + "[tool.harness.ci]\nparallelism = 0\n",
}


@pytest.mark.parametrize("toml", CONFIG.values(), ids=CONFIG.keys())
def test_config_tables(project, capsys, toml):
    suite = toml if "suites.models" in toml or "suites = 1" in toml else SUITE + toml
    (project / "pyproject.toml").write_text(suite)
    argv = ["ci", "matrix"] if "[tool.harness.ci]" in toml else ["run", "--platform", "cpu", "models"]
    one_line_exit_2(capsys, argv)


def test_a_pyproject_that_is_not_utf8(project, capsys):
    (project / "pyproject.toml").write_bytes(SUITE.encode() + b"# caf\xe9\n")
    one_line_exit_2(capsys, ["run", "--platform", "cpu", "models"])


def test_a_suite_named_to_leave_the_project_writes_nothing_outside(project, capsys):
    (project / "pyproject.toml").write_text('[tool.harness.suites."../../x"]\npaths = ["tests"]\n')
    before = sorted(project.parent.parent.iterdir())
    one_line_exit_2(capsys, ["run", "--platform", "cpu", "../../x"])
    assert sorted(project.parent.parent.iterdir()) == before


def test_a_duplicate_phase_name(project, capsys):
    twice = PHASE.format('name = "p"') + '[[tool.harness.suites.models.phases]]\nname = "p"\n'
    (project / "pyproject.toml").write_text(twice)
    one_line_exit_2(capsys, ["run", "--platform", "cpu", "models"])


ENV = {
    "HARNESS_PHASE_TIMEOUT_S=0": ("HARNESS_PHASE_TIMEOUT_S", "0"),
    "HARNESS_PHASE_TIMEOUT_S=abc": ("HARNESS_PHASE_TIMEOUT_S", "abc"),
    "HARNESS_PHASE_TIMEOUT_S=nan": ("HARNESS_PHASE_TIMEOUT_S", "nan"),
    "HARNESS_SETTLE=maybe": ("HARNESS_SETTLE", "maybe"),
    "HARNESS_TEST_TIMEOUT_S=1e20": ("HARNESS_TEST_TIMEOUT_S", "1e20"),
    "BUILDKITE_PARALLEL_JOB alone": ("BUILDKITE_PARALLEL_JOB", "1"),
}


@pytest.mark.parametrize(("name", "value"), ENV.values(), ids=ENV.keys())
def test_environment_overrides(project, capsys, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    one_line_exit_2(capsys, ["run", "--platform", "cpu", "models"])


REPORTS = {
    "empty": "",
    "truncated": '{"version": 1, "phases": [',
    "not JSON": "hello",
    "an array": "[1, 2]",
    "NaN": json.dumps(_report(phases__0__wall_s=float("nan"))),
    "Infinity": json.dumps(_report(phases__0__wall_s=float("inf"))),
    "1e400": json.dumps(_report()).replace('"wall_s": 1.0', '"wall_s": 1e400', 1),
    "a 400-digit integer duration": json.dumps(_report(tests__0__call_s=10**400)),
    "deep nesting": "[" * 100_000 + "]" * 100_000,
    "wrong version": json.dumps(_report(version=99)),
    "no version": json.dumps({"phases": []}),
    "phases not a list": json.dumps(_report(phases={})),
    "wall_s a string": json.dumps(_report(phases__0__wall_s="x")),
    "outcomes not counts": json.dumps(_report(phases__0__outcomes={"passed": "1"})),
    "a test not an object": json.dumps(_report(tests=[1])),
    "a test without a file": json.dumps(_report(tests=[{"outcome": "passed"}])),
    "starts by_kind a list": json.dumps(_report(starts__total__by_kind=[])),
    "starts by_phase not tables": json.dumps(_report(starts__by_phase={"p": 1})),
    "a file entry a number": json.dumps(_report(files={"t.py": 1})),
    "a file's wall a string": json.dumps(_report(files={"t.py": {"wall_s": "1"}})),
    "a file without wall_s": json.dumps(_report(files={"t.py": {"outcomes": {}}})),
    "a file without outcomes": json.dumps(_report(files={"t.py": {"wall_s": 1.0}})),
    "reused a string": json.dumps(_report(starts__total={"by_kind": {}, "reused": "x"})),
    "saved_s a string": json.dumps(_report(starts__total={"by_kind": {}, "saved_s": "x"})),
}


@pytest.mark.parametrize("text", REPORTS.values(), ids=REPORTS.keys())
def test_report_files(project, capsys, text):
    (project / "bad.json").write_text(text)
    one_line_exit_2(capsys, ["compare", "good.json", "bad.json", "--fail-on-regression", "wall:10%"])


def test_a_report_that_is_not_utf8(project, capsys):
    (project / "bad.json").write_bytes(b'{"version": 1, "suite": "\xff"}')
    one_line_exit_2(capsys, ["compare", "bad.json", "good.json"])


PHASES = {
    "phases not a list": {"phases": {}},
    "a phase without a name": {"phases": [{"wall_s": 1}]},
    "wall_s a string": {"phases": [{"name": "p", "wall_s": "1"}]},
    "started a list": {"phases": [{"name": "p", "started": []}]},
    "exit_code a float": {"phases": [{"name": "p", "exit_code": 1.5}]},
    "timed_out a string": {"phases": [{"name": "p", "timed_out": "yes"}]},
}


@pytest.mark.parametrize("meta", PHASES.values(), ids=PHASES.keys())
def test_phases_files(project, capsys, meta):
    (project / "run").mkdir()
    (project / "run" / "phases.json").write_text(json.dumps(meta))
    one_line_exit_2(capsys, ["report", "run"])


def test_a_ledger_file_that_is_a_symlink(project, capsys):
    (project / "run" / "ledger" / "p").mkdir(parents=True)
    (project / "elsewhere.jsonl").write_text("")
    (project / "run" / "ledger" / "p" / "main.jsonl").symlink_to(project / "elsewhere.jsonl")
    one_line_exit_2(capsys, ["report", "run"])


def test_an_oversized_ledger_file(project, capsys, monkeypatch):
    monkeypatch.setattr("harness.ledger.reader.MAX_FILE_BYTES", 64)
    (project / "run" / "ledger" / "p").mkdir(parents=True)
    (project / "run" / "ledger" / "p" / "main.jsonl").write_text('{"event": "x", "t": 1}\n' * 10)
    one_line_exit_2(capsys, ["report", "run"])


def test_an_oversized_report(project, capsys, monkeypatch):
    monkeypatch.setattr("harness.report.store.MAX_BYTES", 64)
    one_line_exit_2(capsys, ["compare", "good.json", "good.json"])


def test_an_out_directory_of_the_users_is_refused_and_its_files_kept(project, capsys):
    mine = project / "mine"
    files = ["summary.md", "report.html", "report.json", "junit/p.xml", "ledger/p/w.jsonl", "notes.jsonl"]
    for name in files:
        (mine / name).parent.mkdir(parents=True, exist_ok=True)
        (mine / name).write_text(f"the user's {name}")
    err = one_line_exit_2(capsys, ["run", "--platform", "cpu", "--out", "mine", "models"])
    assert "not a harness run directory" in err
    assert {name: (mine / name).read_text() for name in files} == {
        name: f"the user's {name}" for name in files
    }
    assert not (mine / directory.LOCK).exists()


def test_a_fifo_given_to_compare_is_refused_without_waiting(project):
    os.mkfifo(project / "fifo.json")
    done = subprocess.run(
        [sys.executable, "-m", "harness", "compare", "fifo.json", "good.json"],
        capture_output=True,
        text=True,
        timeout=60,  # the old code blocked in open() for ever
    )
    assert (done.returncode, done.stderr.count("\n")) == (2, 1), done.stderr
    assert "not a regular file" in done.stderr


def test_rich_markup_in_a_path_is_printed_as_text(project, capsys):
    (project / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    out = "[bold]out[/bold][/i]"
    assert harness(["run", "--platform", "cpu", "--out", out, "models"]) == 0
    printed = capsys.readouterr().out
    assert f"→ {out}" in printed and f"report: {out}/report.json" in printed
    assert (project / out / "report.json").exists()


def test_publishing_the_summary_is_best_effort(project, capsys, monkeypatch):
    (project / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    agent = project / "bin" / "buildkite-agent"
    agent.parent.mkdir()
    agent.write_text("#!/nonexistent/interpreter\n")  # on PATH, executable, and cannot run
    agent.chmod(0o755)
    monkeypatch.setenv("PATH", f"{agent.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("BUILDKITE", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(project / "tests"))  # a directory: cannot be appended to
    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("harness: warning:")]
    assert len(warnings) == 2 and "GITHUB_STEP_SUMMARY" in warnings[0] and "buildkite-agent" in warnings[1]
    assert (project / "out" / "summary.md").exists()


def test_a_run_directory_in_use(project, capsys):
    with directory.locked(Path("out")):
        err = one_line_exit_2(capsys, ["run", "--platform", "cpu", "--out", "out", "models"])
    assert f"(pid {os.getpid()}) is using it" in err


def test_a_symlinked_ledger_directory(project, capsys):
    (project / "out").mkdir()
    (project / "elsewhere").mkdir()
    (project / "out" / "ledger").symlink_to(project / "elsewhere")
    one_line_exit_2(capsys, ["run", "--platform", "cpu", "--out", "out", "models"])


def test_a_100_kb_error_is_cut_to_one_short_line(project, capsys):
    err = one_line_exit_2(capsys, ["run", "--platform", "cpu", "x" * 100_000])
    assert len(err) < 700 and "characters, cut" in err


MASKS = {
    "fullwidth zero": "\uff10",
    "fullwidth one among indices": "\uff11,0",
    "superscript two": "\u00b2",
    "past the devices": "5",
    "listed twice": "0,0",
    "neither index nor UUID": "abc",
    "unknown UUID": "GPU-zzz",
    "ambiguous UUID prefix": "GPU-",
}


@pytest.mark.parametrize("mask", MASKS.values(), ids=MASKS.keys())
def test_device_masks(project, capsys, monkeypatch, fake_gpus, mask):
    fake_gpus([gpu(0, total=80 * GIB), gpu(1, total=80 * GIB)], vendor="nvidia")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", mask)
    one_line_exit_2(capsys, ["run", "--platform", "cuda", "models"])


def test_a_keyword_expression_pytest_refuses_only_when_it_matches_a_test(project, capsys):
    """pytest refuses ``-k 'test_ok(x=1)'`` (call parameters) as it matches a test, not as it parses it:
    one line, exit 2, before any phase runs."""
    (project / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    err = one_line_exit_2(capsys, ["run", "--platform", "cpu", "models", "--", "-k", "test_ok(x=1)"])
    assert "call parameters" in err
    assert not (project / "harness-out" / "models-cpu" / "junit").exists()


def test_under_umask_000_nothing_the_run_writes_is_writable_by_others(project):
    """A shared CI host's umask 000 made the run directory and reports world-writable."""
    import stat
    import subprocess
    import sys

    (project / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    script = "import os, sys; os.umask(0); from harness.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", script, "run", "--platform", "cpu", "models"], check=False)
    assert done.returncode == 0
    out = project / "harness-out" / "models-cpu"
    written = [out, *out.rglob("*")]
    assert len(written) > 5
    loose = [
        str(p) for p in written if not p.is_symlink() and p.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    ]
    assert loose == []


@pytest.mark.parametrize(
    "record",
    [
        {"test": "t.py::a", "kind": "vllm", "fingerprint": "abc", "scope": None, "start": "soon"},
        {"test": "t.py::a", "kind": "vllm", "fingerprint": ["abc"], "scope": None, "start": 1.0},
    ],
    ids=["a start time that is text", "a fingerprint that is a list"],
)
def test_history_with_a_record_of_the_wrong_type(project, capsys, record):
    other = {**record, "test": "t.py::b", "start": 2.0, "fingerprint": "abd"}  # sorted beside a good one
    (project / "bad.json").write_text(json.dumps(_report(records=[record, other])))
    one_line_exit_2(capsys, ["run", "--platform", "cpu", "--durations-from", "bad.json", "models"])


@pytest.fixture(scope="module")
def one_run(tmp_path_factory) -> Path:
    """The run directory of one passing run of a ``models`` suite on the CPU."""
    root = tmp_path_factory.mktemp("one-run")
    (root / "tests").mkdir()
    (root / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    (root / "pyproject.toml").write_text(SUITE)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 0
    return root / "out"


@pytest.mark.parametrize(
    "planted",
    [
        "report.json",
        "summary.md",
        "junit.xml",
        "timeline.svg",
        "report.html",
        "phases.json",
        ".harness-run.lock",
    ],
)
def test_a_report_file_planted_as_a_link_never_changes_the_file_it_points_to(
    project, capsys, planted, one_run
):
    """Every file of a run directory a hostile hand replaced by a link to a user's file: the user's file
    keeps its bytes, whether the run then writes its own file or refuses the directory."""
    (project / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    shutil.copytree(one_run, project / "out", symlinks=True)  # the run every case starts from, made once
    users = project / "users-file"
    users.write_text("the user's own\n")
    (project / "out" / planted).unlink()
    (project / "out" / planted).symlink_to(users)
    code = harness(["run", "--platform", "cpu", "--out", "out", "models"])
    capsys.readouterr()
    assert code in (0, 2)
    assert users.read_text() == "the user's own\n"
