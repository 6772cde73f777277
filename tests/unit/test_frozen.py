"""The collection frozen out of the garbage collector's passes while the tests run, and handed back."""

from __future__ import annotations

import gc
import re

pytest_plugins = ["pytester"]

SEES = """
import gc


def test_sees():
    print(f"FROZEN={gc.get_freeze_count()}")
"""


def _frozen_during_the_test(pytester, *args) -> int:
    pytester.makepyfile(test_x=SEES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", "--harness", *args)
    assert result.ret == 0
    return int(re.search(r"FROZEN=(\d+)", result.stdout.str()).group(1))


def test_a_harness_session_runs_its_tests_with_the_collection_frozen(pytester, monkeypatch):
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    assert _frozen_during_the_test(pytester) > 10_000  # pytest's own modules and this item, at least


def test_freeze_collected_false_leaves_the_collector_alone(pytester, monkeypatch):
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    monkeypatch.setenv("HARNESS_FREEZE_COLLECTED", "0")
    assert _frozen_during_the_test(pytester) == 0


def test_the_session_hands_back_what_it_froze_and_leaves_an_outer_freeze_alone(pytester, monkeypatch):
    """In process: a session hands back its own freeze at its end; one inside a session that froze (a
    pytest run by a test) neither freezes more nor hands back the outer's."""
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    pytester.makepyfile(test_x=SEES)
    gc.unfreeze()  # as a process that froze nothing yet; the outer session's freeze comes back below
    try:
        assert pytester.inline_run("-p", "no:cacheprovider", "--harness").ret == 0
        assert gc.get_freeze_count() == 0
        gc.freeze()
        outer = gc.get_freeze_count()
        assert pytester.inline_run("-p", "no:cacheprovider", "--harness").ret == 0
        assert 0.9 * outer < gc.get_freeze_count() <= outer  # less only what died by its references
    finally:
        gc.freeze()
