"""The plugin over real pytest runs (pytester subprocesses) of small suites with a fake runner on fake GPUs.

``FakeRunner`` (tests/unit/runner_suites/fake_runner.py) records through the same path as an instrumented
``vllm.LLM`` and takes its declared share of the fake GPU's memory while alive.
"""

from __future__ import annotations

import textwrap

import pytest

from harness import ledger
from tests.fakes import gpu

pytest_plugins = ["pytester"]

GIB = 2**30
IMPORT = "import pytest\nfrom tests.unit.runner_suites.fake_runner import FakeRunner\n"


@pytest.fixture
def run(pytester, fake_gpus, monkeypatch):
    """Run a suite of ``{file name: source}`` on fake GPUs; returns (result, merged ledger)."""

    def run_suite(files: dict[str, str], *args: str, gpus: int = 1, env: dict | None = None):
        fake_gpus([gpu(n, total=80 * GIB, used=GIB) for n in range(gpus)])
        for name, source in files.items():
            pytester.makepyfile(**{name: IMPORT + textwrap.dedent(source)})
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        directory = pytester.path / "ledger"
        result = pytester.runpytest_subprocess(
            "--harness", "--harness-ledger-dir", str(directory), "-p", "no:cacheprovider", *args
        )
        return result, ledger.read(directory)

    return run_suite


LEAKY = """
@pytest.fixture(scope="module")
def colbert_model():
    with FakeRunner("colbert", gpu_memory_utilization=0.6) as runner:
        yield runner

def test_shared_one(colbert_model):
    pass

def test_shared_two(colbert_model):
    pass

def test_own_engine():
    with FakeRunner("colbert", gpu_memory_utilization=0.6):
        pass
"""

CLASS_SCOPED = """
class TestShared:
    @pytest.fixture(scope="class")
    @classmethod
    def colbert_model(cls):
        with FakeRunner("colbert", gpu_memory_utilization=0.6) as runner:
            yield runner

    def test_shared_one(self, colbert_model):
        pass

    def test_shared_two(self, colbert_model):
        pass

def test_own_engine():
    with FakeRunner("colbert", gpu_memory_utilization=0.6):
        pass
"""


def test_module_scoped_runner_is_named_when_the_next_cannot_start(run):
    result, merged = run({"test_colbert": LEAKY})
    result.assert_outcomes(passed=2, failed=1)
    error = next(line for line in result.outlines if line.startswith("E") and "RunnerBlocked:" in line)
    assert "fixture `colbert_model` is module-scoped and lives until the end of test_colbert.py" in error
    assert "class scope or an explicit close" in error
    assert "started in test_colbert.py::test_shared_one" in error
    blocked = [r for r in merged.records if r["outcome"] == "blocked"]
    assert [r["test"] for r in blocked] == ["test_colbert.py::test_own_engine"]
    assert "colbert_model" in blocked[0]["holders"][0]
    assert [f["type"] for f in merged.findings] == ["live-runner-overlap"]
    result.stdout.fnmatch_lines(["*live-runner-overlap*colbert_model*"])


def test_class_scoped_version_passes_with_one_start_per_configuration(run):
    result, merged = run({"test_colbert": CLASS_SCOPED})
    result.assert_outcomes(passed=3)
    assert [(r["fixture"], r["scope"], r["outcome"]) for r in merged.records] == [
        ("colbert_model", "class", "started"),
        (None, None, "started"),
    ]
    assert merged.findings == []
    assert all(r["need_bytes"] == int(0.6 * 80 * GIB) for r in merged.records)


def test_starts_are_counted_per_file_and_repeats_reported(run):
    files = {
        "test_repeats": """
            @pytest.fixture
            def runner():
                with FakeRunner("small", gpu_memory_utilization=0.3) as r:
                    yield r

            @pytest.mark.parametrize("n", range(3))
            def test_uses(runner, n):
                pass
            """,
        "test_once": """
            def test_one():
                with FakeRunner("other", gpu_memory_utilization=0.3):
                    pass
            """,
    }
    result, merged = run(files)
    result.assert_outcomes(passed=4)
    per_file = {}
    for record in merged.records:
        per_file[record["file"]] = per_file.get(record["file"], 0) + 1
    assert per_file == {"test_repeats.py": 3, "test_once.py": 1}
    assert len({r["fingerprint"] for r in merged.records if r["file"] == "test_repeats.py"}) == 1
    result.stdout.fnmatch_lines(
        [
            "*4 runner starts (vllm 4), 0 blocked, 0 failed*",
            "*test_once.py: 1 (vllm 1)",
            "*test_repeats.py: 3 (vllm 3)",
            "*started 3x in this file: vllm small*",
        ]
    )
    assert [t["outcome"] for t in merged.tests] == ["passed"] * 4


def test_runners_are_attributed_to_their_fixture_scope(run):
    files = {
        "conftest": """
            @pytest.fixture(scope="session")
            def session_runner():
                with FakeRunner("s", gpu_memory_utilization=0.2) as r:
                    yield r
            """,
        "test_scopes": """
            @pytest.fixture(scope="module")
            def module_runner():
                with FakeRunner("m", gpu_memory_utilization=0.2) as r:
                    yield r

            @pytest.fixture
            def function_runner():
                with FakeRunner("f", gpu_memory_utilization=0.2) as r:
                    yield r

            class TestInClass:
                @pytest.fixture(scope="class")
                @classmethod
                def class_runner(cls):
                    with FakeRunner("c", gpu_memory_utilization=0.2) as r:
                        yield r

                def test_all(self, session_runner, module_runner, class_runner, function_runner):
                    with FakeRunner("body", gpu_memory_utilization=0.1):
                        pass
            """,
    }
    result, merged = run(files)
    result.assert_outcomes(passed=1)
    seen = {r["model"]: (r["fixture"], r["scope"], r["test"], r["file"]) for r in merged.records}
    test = "test_scopes.py::TestInClass::test_all"
    assert seen == {
        "s": ("session_runner", "session", test, "test_scopes.py"),
        "m": ("module_runner", "module", test, "test_scopes.py"),
        "c": ("class_runner", "class", test, "test_scopes.py"),
        "f": ("function_runner", "function", test, "test_scopes.py"),
        "body": (None, None, test, "test_scopes.py"),
    }
    assert {r["outcome"] for r in merged.records} == {"started"}


def test_fixture_that_grew_device_memory_is_named(run):
    suite = """
        from tests.unit.runner_suites.fake_runner import _take

        @pytest.fixture(scope="module")
        def big_tensor():
            _take(60 * 2**30)
            yield
            _take(-60 * 2**30)

        def test_uses_tensor(big_tensor):
            pass

        def test_runner():
            with FakeRunner("late", gpu_memory_utilization=0.5):
                pass
        """
    result, merged = run({"test_tensor": suite})
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*RunnerBlocked*fixture `big_tensor` (uses 60.00 GiB*module-scoped*"])
    assert [r["outcome"] for r in merged.records] == ["blocked"]


def test_shortage_no_holder_explains_waits_by_platform_policy(run):
    suite = """
        from tests.unit.runner_suites.fake_runner import _take

        def test_someone_else_holds_memory():
            _take(70 * 2**30)  # not a fixture, not a runner: another process, as far as we know
            with FakeRunner("late", gpu_memory_utilization=0.5):
                pass
        """
    result, merged = run({"test_other": suite}, env={"HARNESS_MEMORY_WAIT_TIMEOUT_S": "0.3"})
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*MemoryTimeout: memory of devices [[]0[]] not under threshold*71.00 GiB of 80.00*"]
    )
    [record] = merged.records
    assert (record["outcome"], record["holders"]) == ("failed", [])
    assert record["error"].startswith("MemoryTimeout")


def test_memory_not_given_back_is_a_finding(run):
    suite = """
        def test_leaks():
            with FakeRunner("leaky", gpu_memory_utilization=0.3, leak_bytes=2 * 2**30):
                pass
        """
    result, merged = run({"test_leak": suite})
    result.assert_outcomes(passed=1)
    [finding] = merged.findings
    assert finding["type"] == "memory-not-released"
    assert finding["test"] == "test_leak.py::test_leaks"
    assert "left 2.00 GiB" in finding["message"]
    result.stdout.fnmatch_lines(["*memory-not-released*leaky*2.00 GiB*"])


def test_records_survive_a_worker_killed_mid_test(run):
    suite = """
        import os, signal

        def test_killed():
            runner = FakeRunner("doomed", gpu_memory_utilization=0.3)
            os.kill(os.getpid(), signal.SIGKILL)

        def test_survivor():
            with FakeRunner("fine", gpu_memory_utilization=0.3):
                pass
        """
    result, merged = run({"test_kill": suite}, "-n", "2", gpus=2)
    outcomes = {r["model"]: (r["outcome"], r["test"], r["worker"]) for r in merged.records}
    assert outcomes["doomed"][:2] == ("never-stopped", "test_kill.py::test_killed")
    assert outcomes["fine"][:2] == ("started", "test_kill.py::test_survivor")
    never = [f for f in merged.findings if f["type"] == "never-stopped"]
    assert [f["test"] for f in never] == ["test_kill.py::test_killed"]
    result.stdout.fnmatch_lines(["*2 runner starts (vllm 2)*", "*never-stopped*doomed*"])
    assert {w["worker"] for w in merged.workers} >= {"gw0", "gw1"}


def test_no_harness_records_nothing(run):
    suite = """
        def test_runs():
            with FakeRunner("x", gpu_memory_utilization=0.3):
                pass
        """
    result, merged = run({"test_plain": suite}, "--no-harness")
    result.assert_outcomes(passed=1)
    assert merged.records == [] and merged.tests == []
    assert "runner starts" not in result.stdout.str()


def test_a_broken_harness_table_is_one_line_not_an_internal_error(pytester):
    pytester.makepyprojecttoml('[tool.harness]\nsettle_ratio = "x"\n')
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--timeout", "5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in result.stderr.str() + result.stdout.str()
    result.stderr.fnmatch_lines(
        ["ERROR: [[]tool.harness[]] settle_ratio: expected a number between 0 and 1, got 'x'"]
    )


# The shape of vLLM's tests/utils.py decorators (fork_new_process_for_each_test and the subprocess-based
# spawn_new_process_for_each_test): the test body runs in a child; the parent fails when the child did.
PROCESS_DECORATORS = """
import functools, os, subprocess, sys

def fork_new_process_for_each_test(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        pid = os.fork()
        if pid == 0:
            try:
                func(*args, **kwargs)
            except BaseException:
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the forked test failed"
    return wrapper

def spawn_new_process_for_each_test(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if os.environ.get("IN_SPAWNED_TEST") == "1":
            return func(*args, **kwargs)
        script = (f"import importlib; importlib.import_module({func.__module__!r})"
                  f".{func.__qualname__}()")
        env = {**os.environ, "IN_SPAWNED_TEST": "1"}
        subprocess.run([sys.executable, "-c", script], env=env, check=True)
    return wrapper
"""


def test_runners_in_forked_and_spawned_test_processes_are_owned_by_the_test(run):
    files = {
        "process_decorators": PROCESS_DECORATORS,
        "test_processes": """
            from process_decorators import fork_new_process_for_each_test, spawn_new_process_for_each_test

            @fork_new_process_for_each_test
            def test_forked():
                for _ in range(2):
                    with FakeRunner("forked", gpu_memory_utilization=0.2):
                        pass

            @spawn_new_process_for_each_test
            def test_spawned():
                for _ in range(2):
                    with FakeRunner("spawned", gpu_memory_utilization=0.2):
                        pass

            def test_parent():
                with FakeRunner("parent", gpu_memory_utilization=0.2):
                    pass
            """,
    }
    result, merged = run(files, "--timeout", "60")
    result.assert_outcomes(passed=3)
    seen = [(r["model"], r["test"], r["outcome"]) for r in merged.records]
    assert sorted(seen) == sorted(
        [("forked", "test_processes.py::test_forked", "started")] * 2
        + [("spawned", "test_processes.py::test_spawned", "started")] * 2
        + [("parent", "test_processes.py::test_parent", "started")]
    )
    assert len({r["id"] for r in merged.records}) == 5
    children = {r["id"].rsplit("-", 1)[0] for r in merged.records if r["model"] != "parent"}
    assert len(children) == 2 and all(c.startswith("main.") for c in children)  # main.<pid> each


def test_a_class_scoped_fixture_builds_from_the_session_scoped_runner_classes(run):
    suite = """
        from harness.runners import HfRunner, VllmRunner

        class TestShared:
            @pytest.fixture(scope="class")
            def classes(self, vllm_runner, hf_runner):
                return vllm_runner, hf_runner

            def test_classes(self, classes):
                assert classes == (VllmRunner, HfRunner)
        """
    result, _ = run({"test_scope": suite})
    result.assert_outcomes(passed=1)


def test_a_failed_start_keeps_its_cause_and_tracebacks_show_the_users_frames(run):
    suite = """
        from harness.tracking import starts

        def test_invalid_config():
            try:
                raise OSError("node 0 has 6.05 GiB free")
            except OSError as error:
                with starts.starting("vllm", "m", {}):
                    message = "1 validation error for VllmConfig\\n  max_model_len: too long"
                    raise ValueError(message) from error

        def test_blocked():
            with FakeRunner("first", gpu_memory_utilization=0.8):
                with FakeRunner("second", gpu_memory_utilization=0.8):
                    pass
        """
    result, merged = run({"test_cause": suite})
    result.assert_outcomes(failed=2)
    failed = next(r for r in merged.records if r["test"].endswith("test_invalid_config"))
    assert failed["error"] == (
        "ValueError: 1 validation error for VllmConfig\n  max_model_len: too long\n"
        "caused by: OSError: node 0 has 6.05 GiB free"
    )
    text = result.stdout.str()
    blocked = text[text.index("_ test_blocked _") :]
    assert "RunnerBlocked" in blocked
    assert not any(f in blocked for f in ("contextlib", "harness/tracking", "harness/memory"))
