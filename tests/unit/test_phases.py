"""``harness run``: suites and phases from pyproject, phase order, timeouts, the exit-code rule, sharding.

Each ``harness run`` here starts real pytest processes (and xdist workers) in a pytester directory.
"""

from __future__ import annotations

import json
import time

import pytest

from harness.cli import main as harness
from harness.config.suites import Phase, parse_suite
from harness.errors import ConfigError
from harness.report.outcomes import worst
from harness.run.exits import run_exit
from harness.run.process import REPORT_MARGIN_S, phase_timeout
from tests.fakes import gpu

pytest_plugins = ["pytester"]

# Every test appends "<phase> <worker> <mask> <nodeid>" to log.txt, so order and placement can be read back.
RECORDER = """
import os, pathlib

def pytest_runtest_call(item):
    line = " ".join([os.environ.get("HARNESS_PHASE", "-"), os.environ.get("PYTEST_XDIST_WORKER", "main"),
                     os.environ.get("CUDA_VISIBLE_DEVICES", "-"), item.nodeid])
    with open(pathlib.Path(item.config.rootpath, "log.txt"), "a") as log:
        log.write(line + "\\n")
"""

PYPROJECT = """
[tool.pytest.ini_options]
markers = ["standalone: builds its own runners"]

[tool.harness.suites.models]
paths = ["tests"]
{extra}
"""


@pytest.fixture
def project(pytester, fake_gpus):
    """``project(extra_toml, **files)``: a pytester project with a ``models`` suite over ``tests/``."""
    fake_gpus([], vendor="nvidia")  # a CPU machine unless a test describes GPUs

    def make(extra: str = "", **files: str):
        pytester.makefile(".toml", pyproject=PYPROJECT.format(extra=extra))
        pytester.makeconftest(RECORDER)
        pytester.mkdir("tests")
        for name, text in files.items():
            (pytester.path / "tests" / f"{name}.py").write_text(text)
        return pytester.path

    return make


def log(pytester) -> list[list[str]]:
    path = pytester.path / "log.txt"
    return [line.split(" ") for line in path.read_text().splitlines()] if path.exists() else []


def phases_json(out) -> dict:
    return json.loads((out / "phases.json").read_text())


SHARED = "def test_a():\n    pass\n\ndef test_b():\n    pass\n"
ALONE = "import pytest\n\n@pytest.mark.standalone\ndef test_alone():\n    pass\n"
MULTI = "import pytest\n\n@pytest.mark.gpus(2)\ndef test_two():\n    pass\n"


def test_default_phases_run_in_order_each_with_its_own_selection(project, pytester, fake_gpus):
    fake_gpus([gpu(i) for i in range(4)], vendor="nvidia")
    project(test_shared=SHARED, test_alone=ALONE, test_multi=MULTI)
    assert harness(["run", "--out", "out", "models"]) == 0
    ran = log(pytester)
    assert [line[0] for line in ran] == ["shared-engine"] * 2 + ["standalone", "multi-gpu"]
    assert {line[3] for line in ran[:2]} == {"tests/test_shared.py::test_a", "tests/test_shared.py::test_b"}
    assert all(line[1].startswith("gw") and line[2] in "0123" for line in ran[:3])
    assert ran[3][1:] == ["main", "0,1", "tests/test_multi.py::test_two"]
    meta = phases_json(pytester.path / "out")
    assert (meta["suite"], meta["platform"], meta["shard"]) == ("models", "cuda", None)
    assert [(p["name"], p["exit_code"], p["timed_out"]) for p in meta["phases"]] == [
        ("shared-engine", 0, False),
        ("standalone", 0, False),
        ("multi-gpu", 0, False),
    ]
    assert ["-n", "auto", "--dist", "loadscope"] == meta["phases"][0]["args"][1:5]
    assert "--dist" not in meta["phases"][2]["args"]
    for phase in ("shared-engine", "standalone", "multi-gpu"):
        assert (pytester.path / "out" / "junit" / f"{phase}.xml").exists()
        assert list((pytester.path / "out" / "ledger" / phase).glob("*.jsonl"))
    assert (pytester.path / "out" / "report.json").exists()


def test_only_the_chosen_phases_run_and_pytest_args_pass_through(project, pytester):
    project(test_shared=SHARED, test_alone=ALONE)
    code = harness(["run", "--platform", "cpu", "--phase", "shared-engine", "models", "--", "-k", "test_b"])
    assert code == 0
    assert [(line[0], line[3]) for line in log(pytester)] == [
        ("shared-engine", "tests/test_shared.py::test_b")
    ]
    meta = phases_json(pytester.path / "harness-out" / "models-cpu")
    assert [p["name"] for p in meta["phases"]] == ["shared-engine"]


FAILS = "def test_fails():\n    assert False\n"
PHASES = """
[[tool.harness.suites.models.phases]]
name = "first"
keywords = "test_ok"

[[tool.harness.suites.models.phases]]
name = "failing"
keywords = "test_fails"
workers = "serial"

[[tool.harness.suites.models.phases]]
name = "empty"
markers = "no_such_marker"

[[tool.harness.suites.models.phases]]
name = "last"
keywords = "test_late"
workers = "serial"
"""
OK = "def test_ok():\n    pass\n"
LATE = "def test_late():\n    pass\n"


def test_a_failing_phase_does_not_stop_the_run_and_sets_the_exit_code(project, pytester):
    project(PHASES, test_ok=OK, test_late=LATE, test_fails=FAILS)
    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 1
    meta = phases_json(pytester.path / "out")
    assert [(p["name"], p["exit_code"]) for p in meta["phases"]] == [
        ("first", 0),
        ("failing", 1),
        ("empty", 5),
        ("last", 0),
    ]
    assert [line[0] for line in log(pytester)] == ["first", "failing", "last"]


def test_fail_fast_stops_after_the_failing_phase(project, pytester):
    project(PHASES, test_ok=OK, test_late=LATE, test_fails=FAILS)
    assert harness(["run", "--platform", "cpu", "--out", "out", "--fail-fast", "models"]) == 1
    assert [p["name"] for p in phases_json(pytester.path / "out")["phases"]] == ["first", "failing"]


def test_an_empty_phase_is_not_a_failure(project, pytester):
    project(PHASES, test_ok=OK, test_late=LATE)
    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 0
    phases = phases_json(pytester.path / "out")["phases"]
    assert [p["exit_code"] for p in phases] == [0, 5, 5, 0]
    assert [p["selected"] for p in phases] == [1, 0, 0, 1]
    assert [p["args"] != [] for p in phases] == [True, False, False, True]  # no pytest for an empty one


@pytest.mark.parametrize(
    ("codes", "expected"),
    [([0, 5, 0], 0), ([5, 5], 0), ([0, 1, 5], 1), ([1, 2, 0], 2), ([0, 137, 1], 137), ([], 0)],
)
def test_worst_exit_code(codes, expected):
    assert worst(codes) == expected


HANG_PHASES = """
[[tool.harness.suites.models.phases]]
name = "hangs"
keywords = "test_hangs or test_before"
workers = "serial"
timeout_s = 3

[[tool.harness.suites.models.phases]]
name = "after"
keywords = "test_ok"
"""
HANGS = "import time\n\ndef test_before():\n    pass\n\ndef test_hangs():\n    time.sleep(600)\n"


def test_a_phase_past_its_timeout_is_stopped_and_the_next_phase_runs(project, pytester):
    project(HANG_PHASES, test_hang=HANGS, test_ok="def test_ok():\n    pass\n")
    code = harness(["run", "--platform", "cpu", "--out", "out", "models"])
    meta = phases_json(pytester.path / "out")
    hung, after = meta["phases"]
    # timed out: the 600 s hang was cut (by its 3 s timeout, the only one the phase has)
    assert hung["timed_out"] and hung["exit_code"] == 2
    assert (after["timed_out"], after["exit_code"]) == (False, 0)
    assert code == 3  # a phase stopped at its timeout: not bad input (2), not failed tests (1)
    assert [line[0] for line in log(pytester)] == ["hangs", "hangs", "after"]
    assert 'name="test_before"' in (pytester.path / "out" / "junit" / "hangs.xml").read_text()


ONE_HANGING_PHASE = """
[[tool.harness.suites.models.phases]]
name = "hangs"
keywords = "test_hangs or test_before"
workers = "serial"
"""


def test_the_ci_deadline_stops_a_phase_in_time_to_write_the_report(project, pytester, monkeypatch):
    """No timeout_s: only HARNESS_CI_DEADLINE (15 s past the report margin from now: the run's collection
    pass comes first, slow on a loaded machine) stops the phase."""
    project(ONE_HANGING_PHASE, test_hang=HANGS)
    monkeypatch.setenv("HARNESS_CI_DEADLINE", str(time.time() + REPORT_MARGIN_S + 15))
    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 3
    (hung,) = phases_json(pytester.path / "out")["phases"]
    assert hung["timed_out"]  # the 600 s hang was cut: only the deadline could cut it
    assert (pytester.path / "out" / "report.json").is_file()
    assert 'name="test_before"' in (pytester.path / "out" / "junit" / "hangs.xml").read_text()


def test_the_phase_timeout_is_the_shorter_of_its_own_and_the_time_left_before_the_ci_deadline():
    now = 1000.0
    assert phase_timeout(None, None, now) is None
    assert phase_timeout(60.0, None, now) == 60.0
    assert phase_timeout(None, now + REPORT_MARGIN_S + 300, now) == 300.0
    assert phase_timeout(60.0, now + REPORT_MARGIN_S + 300, now) == 60.0
    assert phase_timeout(None, now, now) == 1.0  # past the deadline: stopped at once, the report written


@pytest.mark.parametrize(
    ("value", "says"), [("soon", "a number or null, got 'soon'"), ("nan", "a finite number, got nan")]
)
def test_a_malformed_ci_deadline_is_a_one_line_error(project, capsys, monkeypatch, value, says):
    project(test_shared=SHARED)
    monkeypatch.setenv("HARNESS_CI_DEADLINE", value)
    assert harness(["run", "--platform", "cpu", "models"]) == 2
    assert capsys.readouterr().err == f"harness: error: HARNESS_CI_DEADLINE: expected {says}\n"


def test_shards_split_the_suites_files_and_every_phase_keeps_to_its_shard(project, pytester):
    files = {f"test_{n}": f"def test_{n}():\n    pass\n" for n in "abcdef"}
    project(**files)
    ran = {}
    for index in (0, 1):
        (pytester.path / "log.txt").unlink(missing_ok=True)
        code = harness(
            ["run", "--platform", "cpu", "--out", f"out{index}", "--shard", f"{index}/2", "models"]
        )
        assert code == 0
        ran[index] = {line[3] for line in log(pytester)}
        assert phases_json(pytester.path / f"out{index}")["shard"] == f"{index}/2"
    assert ran[0] and ran[1] and not ran[0] & ran[1]
    assert ran[0] | ran[1] == {f"tests/test_{n}.py::test_{n}" for n in "abcdef"}


def test_unknown_suite_and_phase_are_one_line_errors(project, capsys):
    project(test_shared=SHARED)
    assert harness(["run", "--platform", "cpu", "nope"]) == 2
    assert capsys.readouterr().err == "harness: error: unknown suite 'nope' (known: models)\n"
    assert harness(["run", "--platform", "cpu", "--phase", "nope", "models"]) == 2
    assert capsys.readouterr().err == (
        "harness: error: suite 'models' has no phase 'nope' (phases: shared-engine, standalone, multi-gpu)\n"
    )


def test_a_malformed_suite_table_fails_the_run_with_exit_2(project, capsys):
    project('[[tool.harness.suites.models.phases]]\nname = "x"\nworkers = "many"\n')
    assert harness(["run", "--platform", "cpu", "models"]) == 2
    assert capsys.readouterr().err == (
        "harness: error: [tool.harness.suites.models] phase 'x' workers: "
        "expected 'per-gpu', 'serial' or an integer between 1 and 512, got 'many'\n"
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({}, "[tool.harness.suites.s] paths: missing (needed for the default phases)"),
        (
            {"paths": "tests"},
            "[tool.harness.suites.s] paths: expected a non-empty list of non-empty strings",
        ),
        ({"paths": ["t"], "phase": []}, "[tool.harness.suites.s] phase: unknown key (known: paths, phases)"),
        (
            {"paths": ["t"], "phases": []},
            "phases: expected a non-empty array of tables",
        ),
        ({"phases": [{"name": "a"}]}, "[tool.harness.suites.s] phase 'a' paths: missing"),
        (
            {"paths": ["t"], "phases": [{}]},
            "s] phases[0] name: expected a non-empty string",
        ),
        (
            {"paths": ["t"], "phases": [{"name": "a", "dist": "load"}]},
            "s] phase 'a' dist: expected 'loadscope' or 'loadfile', got 'load'",
        ),
        (
            {"paths": ["t"], "phases": [{"name": "a", "timeout_s": 0}]},
            "phase 'a' timeout_s: expected a number > 0 and ≤ 1e+07 or null, got 0",
        ),
        (
            {"paths": ["t"], "phases": [{"name": "a", "workers": 0}]},
            "phase 'a' workers: expected 'per-gpu', 'serial' or an integer between 1 and 512, got 0",
        ),
        (
            {"paths": ["t"], "phases": [{"name": "a", "markers": ""}]},
            "phase 'a' markers: expected a non-empty string or null, got ''",
        ),
        ({"paths": ["t"], "phases": [{"name": "a", "mark": "x"}]}, "phases[0] mark: unknown key"),
        ({"paths": ["t"], "phases": [{"name": "a"}, {"name": "a"}]}, "phase 'a': the name is used twice"),
    ],
)
def test_suite_validation_names_suite_phase_and_key(table, message):
    with pytest.raises(ConfigError) as error:
        parse_suite("s", table)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_phase_tables_become_pytest_selections():
    suite = parse_suite(
        "s",
        {
            "paths": ["tests/a"],
            "phases": [
                {"name": "x", "markers": "not slow", "keywords": "embed", "workers": 2, "dist": "loadfile"},
                {"name": "y", "paths": ["tests/b"], "workers": "serial", "timeout_s": 60},
            ],
        },
    )
    x, y = suite.phases
    assert x.selection() == ["tests/a", "-n", "2", "--dist", "loadfile", "-m", "not slow", "-k", "embed"]
    # the user's arguments go before the phase's -m / -k: pytest keeps the last
    assert x.selection(extra=["-vm", "slow"])[-6:] == ["-vm", "slow", "-m", "not slow", "-k", "embed"]
    assert y == Phase("y", ("tests/b",), workers="serial", timeout_s=60.0)
    assert y.selection() == ["tests/b", "-n", "0"]


CORE = (
    "import pytest\n\n@pytest.mark.core_model\ndef test_a():\n    pass\n\ndef test_b():\n    pass\n\n"
    "@pytest.mark.core_model\n@pytest.mark.standalone\ndef test_alone():\n    pass\n"
)


# as pytest reads them: a cluster (-v -m core_model), -m=, -k=
SELECTIONS = [
    ["-m", "core_model"],
    ["-k", "test_a or test_alone"],
    ["-mcore_model"],
    ["-vm", "core_model"],
    ["-m=core_model"],
    ["-k=test_a or test_alone"],
    ["-qvmcore_model"],
]


@pytest.mark.parametrize("selection", SELECTIONS)
def test_selection_after_the_dashes_narrows_every_phase_and_runs_each_test_once(project, pytester, selection):
    project(test_core=CORE)
    assert harness(["run", "--platform", "cpu", "--out", "out", "models", "--", *selection]) == 0
    assert sorted((line[0], line[3]) for line in log(pytester)) == [
        ("shared-engine", "tests/test_core.py::test_a"),
        ("standalone", "tests/test_core.py::test_alone"),
    ]
    phases = phases_json(pytester.path / "out")["phases"]
    assert [p["selected"] for p in phases] == [1, 1, 0]


OVERLAPPING = """
[[tool.harness.suites.models.phases]]
name = "core"
markers = "core_model"

[[tool.harness.suites.models.phases]]
name = "rest"
markers = "not standalone"
"""


def test_a_test_two_phases_select_runs_in_the_first_only(project, pytester):
    project(OVERLAPPING, test_core=CORE)
    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 0
    assert sorted((line[0], line[3]) for line in log(pytester)) == [
        ("core", "tests/test_core.py::test_a"),
        ("core", "tests/test_core.py::test_alone"),
        ("rest", "tests/test_core.py::test_b"),
    ]
    rest = phases_json(pytester.path / "out")["phases"][1]
    assert "--deselect=tests/test_core.py::test_a" in rest["args"]
    report = json.loads((pytester.path / "out" / "report.json").read_text())
    assert [f["type"] for f in report["findings"]] == []


# Every pytest process the run starts appends "<phase> <numprocesses> <role>" to configured.txt.
CONFIGURED = """
import os, pathlib

def pytest_configure(config):
    role = "worker" if hasattr(config, "workerinput") else "main"
    line = f"{os.environ.get('HARNESS_PHASE', '-')} {config.getoption('numprocesses', None)} {role}"
    with open(pathlib.Path(config.rootpath, "configured.txt"), "a") as out:
        out.write(line + "\\n")
"""


def test_a_one_worker_phase_starts_no_xdist_controller_and_an_empty_phase_no_pytest(project, pytester):
    project(test_shared=SHARED)
    (pytester.path / "conftest.py").write_text(RECORDER + CONFIGURED)
    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 0
    started = (pytester.path / "configured.txt").read_text().splitlines()
    # one collection for the run ("-"), then shared-engine in one process; standalone and multi-gpu select
    # nothing and start nothing
    assert started == ["- 0 main", "shared-engine 0 main"]
    assert {line[1] for line in log(pytester)} == {"main"}
    phases = phases_json(pytester.path / "out")["phases"]
    assert phases[0]["args"][1:3] == ["-n", "0"]
    assert [(p["name"], p["exit_code"], p["args"]) for p in phases[1:]] == [
        ("standalone", 5, []),
        ("multi-gpu", 5, []),
    ]


def test_vllms_distributed_marker_lands_in_the_multi_gpu_phase(project, pytester, fake_gpus):
    fake_gpus([gpu(i) for i in range(4)], vendor="nvidia")
    distributed = "import pytest\n\n@pytest.mark.distributed(num_gpus=2)\ndef test_two():\n    pass\n"
    project(test_shared=SHARED, test_distributed=distributed)
    assert harness(["run", "--out", "out", "models"]) == 0
    ran = log(pytester)
    assert [line[0] for line in ran] == ["shared-engine"] * 2 + ["multi-gpu"]
    assert ran[2][1:] == ["main", "0,1", "tests/test_distributed.py::test_two"]


def test_a_collection_that_fails_runs_every_phase_so_each_shows_the_error(project, pytester):
    project(test_shared=SHARED, test_broken="import no_such_module\n")
    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 1  # a collection error fails
    phases = phases_json(pytester.path / "out")["phases"]
    assert [(p["selected"], p["exit_code"]) for p in phases] == [(None, 2)] * 3


def test_pytests_internal_error_is_a_harness_fault(project, pytester):
    project(ONE_HANGING_PHASE, test_ok="def test_ok():\n    pass\n")
    (pytester.path / "conftest.py").write_text(
        "def pytest_collection_finish(session):\n    raise RuntimeError('x')\n"
    )
    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 4
    (phase,) = phases_json(pytester.path / "out")["phases"]
    assert phase["exit_code"] == 3  # pytest's INTERNALERROR, kept as pytest said it


@pytest.mark.parametrize(
    ("phases", "expected"),
    [
        ([(0, False), (5, False)], 0),
        ([(1, False), (2, False)], 1),  # pytest's 2 (interrupted) is a collection error
        ([(137, False), (0, False)], 1),  # a process a signal ended: a crashed worker
        ([(2, True), (1, False)], 3),
        ([(4, False), (1, False)], 2),  # pytest's usage error: the arguments after --
        ([(3, False), (2, True)], 4),
        ([(127, False)], 4),  # the keeper could not start the phase
        ([], 0),
    ],
)
def test_the_runs_exit_code_is_the_worst_phases_in_harness_terms(phases, expected):
    assert run_exit([{"exit_code": code, "timed_out": timed_out} for code, timed_out in phases]) == expected


NODE_PATHS = """
[[tool.harness.suites.models.phases]]
name = "one"
paths = ["tests/test_shared.py::test_a"]

[[tool.harness.suites.models.phases]]
name = "rest"
"""


def test_a_phase_path_naming_one_test_takes_only_that_test(project, pytester):
    project(NODE_PATHS, test_shared=SHARED)
    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 0
    assert sorted((line[0], line[3]) for line in log(pytester)) == [
        ("one", "tests/test_shared.py::test_a"),
        ("rest", "tests/test_shared.py::test_b"),
    ]
