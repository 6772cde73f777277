"""The benchmarks' own arithmetic, where a slip would print a wrong figure."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
plugin_overhead = importlib.import_module("plugin_overhead")  # fails, never skips, if it breaks
trivial = importlib.import_module("trivial")

FORKED = """==25753== Cachegrind, a high-precision tracing profiler
==25753== Command: python -m pytest -q test_trivial.py --harness
==25753==
==25756==
==25756== I   refs:      790,736,519
2000 passed in 36.55s
==25753==
==25753== I   refs:      7,671,847,023
"""


def test_the_instructions_are_pytests_not_a_forked_childs():
    assert plugin_overhead.pytest_refs(FORKED) == 7_671_847_023


def test_a_report_without_pytests_count_says_so():
    with pytest.raises(SystemExit, match="no instruction count for pytest"):
        plugin_overhead.pytest_refs(FORKED.rsplit("==25753==", 1)[0])


# The pair's processes, told apart by their arguments: each writes its pid and, as it ends, its own CPU
# seconds; the slow one's test waits until the quick one has been reaped (its pid gone), so it ends after the
# quick one was timed, whatever the host's load. The quick one spends a CPU second of its own.
TOGETHER = """
import os, pathlib, time


def _side(config):
    return "slow" if any(arg.endswith("test_slow.py") for arg in config.args) else "quick"


def pytest_configure(config):
    pathlib.Path(_side(config) + ".pid").write_text(str(os.getpid()))
    if _side(config) == "quick":
        while time.process_time() < 1.0:
            pass


def pytest_unconfigure(config):
    pathlib.Path(_side(config) + ".cpu").write_text(repr(time.process_time()))
"""
WAITS = """
import pathlib, time

import psutil


def test_waits_for_the_quick_one():
    while not pathlib.Path("quick.pid").exists():
        time.sleep(0.02)
    while psutil.pid_exists(int(pathlib.Path("quick.pid").read_text())):
        time.sleep(0.02)
"""


def test_runs_started_together_are_each_timed_as_their_own(tmp_path):
    """``--together``'s pairs: each process's wall ends when it does, and its CPU seconds are its own."""
    root = trivial.suite(tmp_path, 3)
    (root / "conftest.py").write_text(TOGETHER)
    (root / "test_slow.py").write_text(WAITS)
    env = trivial.environment()
    (quick, quick_cpu), (slow, slow_cpu) = trivial.timed_together(
        [["-p", "no:harness"], ["-p", "no:harness", "test_slow.py"]], root, env
    )
    assert quick < slow  # the quick one's wall is not the pair's: it was timed before the slow one ended
    own = {side: float((root / f"{side}.cpu").read_text()) for side in ("quick", "slow")}
    assert quick_cpu >= own["quick"] >= 1.0 and slow_cpu >= own["slow"]
    # the slow one's seconds are its own: the quick one's second is not in them (as it would be in the
    # children's total), however long the slow one waited
    assert slow_cpu < own["slow"] + own["quick"]


def test_a_run_that_fails_ends_the_pair_with_its_arguments(tmp_path):
    root = trivial.suite(tmp_path, 1)
    (root / "test_slow.py").write_text("import time\n\n\ndef test_sleeps():\n    time.sleep(60)\n")
    before = {child.pid for child in psutil.Process().children()}
    with pytest.raises(subprocess.CalledProcessError) as failed:
        trivial.timed_together([["test_slow.py"], ["--no-such-option"]], root, trivial.environment())
    assert failed.value.returncode == 4  # pytest's usage error
    assert failed.value.cmd[-1] == "--no-such-option"
    # the sleeping one was ended and reaped, not left running (this process's other children aside)
    assert {child.pid for child in psutil.Process().children()} <= before


def test_a_child_of_the_caller_that_ends_first_is_not_taken_for_one_of_the_pair(tmp_path):
    """An xdist worker has children of its own (an engine process an earlier test left): waiting for any
    child reaped one of those and failed with a KeyError."""
    root = trivial.suite(tmp_path, 1)
    other = subprocess.Popen([sys.executable, "-c", "pass"])
    measured = trivial.timed_together([[], []], root, trivial.environment())
    assert len(measured) == 2 and all(wall > 0 and cpu > 0 for wall, cpu in measured)
    assert other.wait(timeout=60) == 0  # still this test's to reap


def test_the_medians_interval_is_the_binomial_order_statistics():
    """Ten values: the 2nd and the 9th (97.9 % of the time the median lies between them; the 3rd and 8th
    hold it only 89 % of the time). Shuffled, since the rounds come in no order."""
    values = [1.09, 1.01, 1.10, 1.03, 1.07, 1.02, 1.04, 1.06, 1.05, 1.08]
    assert trivial.median_interval(values) == (1.02, 1.09)
    assert trivial.median_interval([1.0] * 45 + [2.0] * 4)[1] == 1.0  # the tail is cut off


def test_too_few_rounds_give_their_whole_range():
    assert trivial.median_interval([1.2, 0.9, 1.0]) == (0.9, 1.2)
