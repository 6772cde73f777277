"""One previous run (harness.report.previous.History): read once per process, one split, failures first by
whole engine groups, learned timeouts computed with the order, conflicting flags refused, every field of
a history checked at load, and CI values only from the cell's own report."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import split
from harness.pytest_plugin.order import arranged
from harness.report.marks import decode, marked
from harness.report.previous import History, scope, timeout_s
from tests.unit.test_history import PYPROJECT  # the same tiny suite's table
from tests.unit.test_shards import harness, harness_run

pytest_plugins = ["pytester"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    checks = tmp_path / "checks"
    checks.mkdir()
    for name in ("a", "b"):
        (checks / f"check_{name}.py").write_text(
            textwrap.dedent(f"""
            import os

            def test_1():
                pass

            def test_2():
                assert os.environ.get("FAIL") != "{name}"
            """)
        )
    return tmp_path


AUDIT = """
import atexit, os, sys

_watched = os.environ.get("H4_WATCHED")
_count = 0

def _hook(event, args):
    global _count
    if event == "open" and _watched and isinstance(args[0], (str, bytes, os.PathLike)):
        try:
            if os.path.realpath(os.fsdecode(args[0])) == _watched:
                _count += 1
        except (TypeError, ValueError):
            pass

def _write():
    with open(os.path.join(os.environ["H4_COUNTS"], f"{os.getpid()}.txt"), "w") as handle:
        handle.write(f"{_count} {' '.join(sys.argv)[:300]}\\n")

if _watched:
    sys.addaudithook(_hook)
    atexit.register(_write)
"""


def test_a_run_with_history_durations_timeouts_and_a_gpu_free_job_opens_the_history_once(project):
    """Old code: harness run opened the previous report three times (its configurations, the GPU-free
    list, the learned timeouts) and each place had its own rules. Every process (harness run, the
    collection, the phase's pytest) is watched by an audit hook on ``open``."""
    base = harness_run(project, "tiny", "--out", "base", FAIL="b")
    assert base.returncode == 1, base.stderr
    report_path = project / "base" / "report.json"
    report = json.loads(report_path.read_text())
    report["platform"]["name"] = "cuda"  # the GPU cell's history, which the CPU job reads
    report["gpu_free"] = {
        "tests": [
            {"nodeid": t["nodeid"], "seconds": 0.0, "devices": 1, "gpu_minutes": 0.0} for t in report["tests"]
        ],
        "gpu_minutes": 0.0,
    }
    report_path.write_text(json.dumps(report))
    hooks, counts = project / "hooks", project / "counts"
    hooks.mkdir()
    counts.mkdir()
    (hooks / "sitecustomize.py").write_text(AUDIT)
    environment = {
        "PYTHONPATH": os.pathsep.join([str(hooks), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "H4_WATCHED": os.path.realpath(report_path),
        "H4_COUNTS": str(counts),
    }
    args = ["tiny", "--out", "cpu", "--history", "base", "--timeouts-from-history", "--shard", "0/1"]
    done = harness_run(project, *args, "--gpu-free", "only", FAIL="b", **environment)
    assert done.returncode == 1, done.stdout + done.stderr  # check_b's test_2 fails again
    opened = [line.split(" ", 1) for path in counts.iterdir() for line in path.read_text().splitlines()]
    assert len(opened) >= 3  # harness run, its one collection, the phase's pytest
    assert all(int(count) <= 1 for count, _ in opened), opened
    assert sum(int(count) for count, argv in opened if " run " in f" {argv} ") == 1, opened
    assert json.loads((project / "cpu" / "test-timeouts.json").read_text())  # the learned timeouts
    assert json.loads((project / "cpu" / "phases.json").read_text())["split"]["inputs"]["durations"] == (
        "report base"
    )


def test_history_beside_durations_from_is_refused_in_one_line(project):
    """Old code: --history was dropped without a word beside --durations-from."""
    done = harness_run(project, "tiny", "--history", "a", "--durations-from", "b")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "give one" in done.stderr
    also = harness_run(project, "tiny", "--durations-from", "b", HARNESS_HISTORY="a")
    assert also.returncode == 2 and "give one" in also.stderr


def test_a_phases_file_whose_history_has_the_wrong_shape_is_refused(project):
    """Old code: phases.json's ``history`` was any dict: loaded, then ``harness report`` crashed on it."""
    done = harness_run(project, "tiny", "--out", "run", "--history", "nowhere")
    assert done.returncode == 0, done.stderr
    phases = project / "run" / "phases.json"
    for bad in ({"source": "x", "failed": 5}, {"source": 7, "note": "n"}, {"failed": ["a"]}, ["x"]):
        meta = json.loads(phases.read_text())
        phases.write_text(json.dumps({**meta, "history": bad}))
        again = harness(project, "report", "run")
        assert again.returncode == 2, (bad, again.stderr)
        assert "Traceback" not in again.stderr and "history" in again.stderr
        phases.write_text(json.dumps(meta))


# --- properties -----------------------------------------------------------------------------------------

FILES = st.sampled_from(["a.py", "b.py", "c.py", "d.py"])
OWNERS = st.sampled_from(["", "::K", "::L"])
NAMES = st.sampled_from(["t1", "t2", "t3", "t4"])


@st.composite
def collections(draw) -> list[str]:
    """Node ids as pytest collects them: each file's tests together, each class's together."""
    ids = draw(st.lists(st.builds(lambda f, o, n: f"{f}{o}::{n}", FILES, OWNERS, NAMES), unique=True))
    return sorted(ids, key=lambda nodeid: (nodeid.split("::")[0], scope(nodeid), nodeid))


def failures_first(nodeids: list[str], values: dict[str, str]) -> list[str]:
    """The plugin's order over node ids: siblings are a class or a module's functions, blocks files."""
    return arranged(
        nodeids,
        scope,
        lambda n: decode(values.get(n)).configuration,
        lambda n: decode(values.get(n)).failed,
        [lambda n: n.split("::")[0]],
    )


VALUES = st.sampled_from(["A", "B", marked(None), marked("A"), "reuse-sensitive"])


@settings(max_examples=300, deadline=None)
@given(nodeids=collections(), data=st.data(), count=st.integers(1, 5))
def test_every_test_in_exactly_one_shard_engine_groups_whole_under_failures_first(nodeids, data, count):
    """For any collection, history and shard count: each test in exactly one shard; each engine group (a
    unit of the split) on one shard; in each shard's failures-first order each file contiguous, and the
    files holding a failure first."""
    values = data.draw(st.dictionaries(st.sampled_from(nodeids or ["x"]), VALUES))
    module = data.draw(st.sets(FILES))  # files whose module-scoped fixture started an engine
    records = [{"test": n, "scope": "module"} for n in nodeids if n.split("::")[0] in module]
    groups = split.Groups({"records": records})
    made = History(seconds={n: 1.0 for n in nodeids}, groups=groups).plan(nodeids, count, files=False)
    placed = [n for shard in made.shards for n in shard]
    assert sorted(placed) == sorted(nodeids)
    owner = {n: i for i, shard in enumerate(made.shards) for n in shard}
    for unit in {groups.unit(n) for n in nodeids}:
        assert len({owner[n] for n in nodeids if groups.unit(n) == unit}) == 1
    for shard in made.shards:
        ordered = failures_first(list(shard), values)
        assert sorted(ordered) == sorted(shard)
        files = [n.split("::")[0] for n in ordered]
        for file in set(files):
            at = [i for i, f in enumerate(files) if f == file]
            assert at == list(range(at[0], at[0] + len(at)))  # the file's engine group whole
        moved = [decode(values.get(n)).failed for n in ordered]
        hit = {f for f, m in zip(files, moved, strict=True) if m}
        assert all(f in hit for f in files[: sum(files.count(f) for f in hit)])  # failing files first


@settings(max_examples=300, deadline=None)
@given(
    nodeids=collections(),
    data=st.data(),
    bound=st.floats(60.0, 5000.0),
)
def test_no_learned_limit_is_shorter_than_what_its_place_costs(nodeids, data, bound):
    """Each test costs its own seconds, plus its scope's setup where it is the first of its scope (a
    class, or a module's functions), plus the session's where it is the first of all. The history ran
    them in collection order; this run orders them failures first. No test's learned limit may be below
    what its new place costs (``timeout_s`` of it: no healthy test times out for its place)."""
    own = {n: data.draw(st.floats(0, 100)) for n in nodeids}
    setups = {s: data.draw(st.floats(0, 200)) for s in {scope(n) for n in nodeids}}
    session = data.draw(st.floats(0, 200))
    values = data.draw(st.dictionaries(st.sampled_from(nodeids or ["x"]), VALUES))

    def costs(order: list[str]) -> dict[str, tuple[float, float]]:
        """Per test: (its setup, its total) in ``order``."""
        seen: set[str] = set()
        found = {}
        for index, n in enumerate(order):
            setup = (setups[scope(n)] if scope(n) not in seen else 0.0) + (session if index == 0 else 0.0)
            seen.add(scope(n))
            found[n] = (setup, setup + own[n])
        return found

    recorded = costs(nodeids)
    configurations = {n: v for n, v in values.items() if n in nodeids}
    history = History(
        kind="report",
        seconds={n: total for n, (_, total) in recorded.items()},
        setup={n: setup for n, (setup, _) in recorded.items()},
        ran=tuple(nodeids),
        configurations=configurations,
    )
    ordered = failures_first(list(nodeids), configurations)
    for collected in ([nodeids], [ordered]):  # the collection's order, or the one the plugin gave it
        limits = history.timeouts(bound, collected)
        for n, (_, cost) in costs(ordered).items():
            assert limits[n] >= timeout_s(cost, bound), (n, limits[n], cost)


def test_a_test_moved_before_its_modules_engine_start_gets_that_start_in_its_limit():
    """The issue's case: a 61 s engine start paid by the module's first test; a test recorded at 0 s
    that failed moves before it (its class first in its file). Old code: its limit stayed 60 s."""
    first, moved = "m.py::test_engine", "m.py::K::test_quick"
    history = History(
        kind="report",
        seconds={first: 62.0, moved: 0.0},
        setup={first: 61.0, moved: 0.0},
        ran=(first, moved),
        configurations={moved: marked(None)},
    )
    order = failures_first([first, moved], dict(history.configurations))
    assert order == [moved, first]
    assert history.timeouts(3600.0, [order])[moved] >= timeout_s(61.0, 3600.0) > 60.0


def test_failures_first_sets_a_modules_engine_up_once(pytester, monkeypatch):
    """Old code: the failing class's run of siblings moved first, apart from its module's functions, and
    the module-scoped engine was set up twice."""
    pytester.makepyfile(
        test_a="def test_1(): pass\n",
        test_b=textwrap.dedent("""
            import pytest

            @pytest.fixture(scope="module")
            def engine():
                with open("setups.txt", "a") as handle:
                    handle.write("up\\n")

            def test_1(engine): pass

            class TestK:
                def test_k(self, engine): pass

            def test_2(engine): pass
            """),
    )
    path = pytester.path / "configurations.json"
    path.write_text(json.dumps({"test_b.py::TestK::test_k": marked(None)}))
    monkeypatch.setenv("HARNESS_CONFIGURATIONS", str(path))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--harness", "-v")
    ran = [line.split(" ")[0] for line in result.outlines if " PASSED" in line]
    assert ran[-1] == "test_a.py::test_1" and ran[0] == "test_b.py::TestK::test_k"
    assert (pytester.path / "setups.txt").read_text() == "up\n"


READERS = [
    "harness/pytest_plugin/cpu_job.py",
    "harness/pytest_plugin/membership.py",
    "harness/run/selection.py",
    "harness/run/probe.py",
    "harness/run/history.py",
    "harness/run/shards.py",
    "harness/ci/learned.py",
    "harness/ci/step_timeouts.py",
    "harness/report/gpu_free_job.py",
    "harness/report/previous.py",
]


@pytest.mark.parametrize("module", READERS)
def test_a_file_the_harness_reads_back_goes_through_the_one_loader(module):
    """Old code: cpu_job, membership, selection and probe read their files with ``read_text`` (a FIFO
    hung the session); every read now goes through harness.report.store."""
    source = (Path(__file__).resolve().parents[2] / module).read_text()
    for reading in (".read_text(", ".read_bytes(", "json.load(", "json.loads(", " open("):
        assert reading not in source, f"{module} reads a file itself ({reading})"


@settings(max_examples=200, deadline=None)
@given(count=st.integers(1, split.MAX_SHARDS), data=st.data())
def test_one_shard_one_parser_one_formatter(count, data):
    """A shard's every shape (``i/N`` on the command line and in reports, the record, the run directory,
    the annotation) comes from ``Shard`` and reads back to it."""
    from harness.config.suites import run_dir
    from harness.report.publish import annotation_context

    shard = split.Shard(data.draw(st.integers(0, count - 1)), count)
    assert split.Shard.parse(str(shard)) == shard
    made = split.plan(["a.py::t"], count, {}, split.Groups())
    assert split.Shard.of_record(made.record(shard, {})) == shard
    assert run_dir("s", "cpu", shard.name) == f"harness-out/s-cpu-{shard.index}of{count}"
    assert annotation_context("s", "cpu", str(shard)) == f"harness-s-cpu-{shard.name}"


def test_a_shard_is_named_in_one_place():
    """Old code: ``<i>of<N>`` was written by run_dir, the annotation context and the Buildkite step."""
    root = Path(__file__).resolve().parents[2] / "harness"
    found = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if path.name != "split.py" and ("}of{" in path.read_text() or '"of")' in path.read_text())
    ]
    assert found == []


def test_the_split_and_the_order_take_a_tests_configuration_by_one_rule():
    """Old code: the split's units took a test's first record in list order, of any kind (an HF load too),
    while the order took its first vLLM start by time: one test, two configurations."""
    records = [
        {"test": "t.py::a", "kind": "hf", "scope": None, "fingerprint": "H", "start": 1.0},
        {"test": "t.py::a", "kind": "vllm", "scope": None, "fingerprint": "B", "start": 3.0},
        {"test": "t.py::a", "kind": "vllm", "scope": None, "fingerprint": "A", "start": 2.0},
    ]
    assert split.Groups({"records": records}).configuration == {"t.py::a": "A"}
    assert split.Groups({"records": records}).unit("t.py::a") == "configuration t.py A"


def test_pytest_shards_durations_beside_history_are_both_honoured_and_beside_durations_from_refused(tmp_path):
    """--harness-durations weighs the split only: beside --history both count (the split by it, the rest by
    the history); beside --durations-from two files would weigh one split, so it is one line."""
    from argparse import Namespace

    from harness.errors import HarnessError
    from harness.run.history import choose

    weights = tmp_path / ".test_durations"
    weights.write_text(json.dumps({"a.py::t": 3.0}))
    args = Namespace(durations_from=None, history=str(tmp_path / "missing"))
    given = choose(args, {}, str(weights), "s", "cpu", None)
    assert given.weights is not None and dict(given.weights.seconds) == {"a.py::t": 3.0}
    assert given.history is not None and given.history.note and given.record == given.history.record()
    with pytest.raises(HarnessError, match="give one"):
        choose(Namespace(durations_from=str(weights), history=None), {}, str(weights), "s", "cpu", None)
    with pytest.raises(HarnessError, match="give one"):
        choose(
            Namespace(durations_from=None, history=None),
            {"HARNESS_DURATIONS_FROM": "x", "HARNESS_HISTORY": "y"},
            None,
            "s",
            "cpu",
            None,
        )
