"""Retries by failure class: a failed test whose class is in ``[tool.harness] retry`` runs again, on fresh
engines, up to ``retries`` more times, ``retry_delay_s`` apart. Nothing is retried by default.

A ``reruns.Policy``, so each try is in the open as the reuse safety net's are (a ``RERUN`` line, a
``rerun`` record with the first failure, surefire's ``flakyFailure``/``rerunFailure`` in JUnit), and the
report can say pass@1 (first tries only) beside the final outcome. SGLang retries only the classes a retry
can help (accuracy on a noisy GPU, a hub hiccup), at most 3 times, 60 s apart; a retry of every exit 1,
as vLLM's AMD steps do, only runs real failures twice.

A test pytest-rerunfailures reruns (``flaky(reruns=N)``) keeps its author's reruns under that plugin
(``reruns.author_reruns``), its tries in the same record (``reruns.Marked``); a failed try of it marks it
``fresh_engine``, so its rerun starts its own engines, as a retry here does.
"""

from __future__ import annotations

import time
from collections.abc import Generator

import pytest

from harness.config.settings import Settings
from harness.pytest_plugin import classes, reruns
from harness.pytest_plugin.session import is_controller, process_context

FRESH = "fresh_engine"  # the marker the reuse pool honours: never take or leave a warm engine


class ByClass:
    """The policy: the last try's class decides whether another follows; the last try counts."""

    name = "failure class"

    def __init__(self, settings: Settings) -> None:
        self.classes = frozenset(settings.retry)
        self.most, self.delay = settings.retries, settings.retry_delay_s

    def begin(self, item: pytest.Item, number: int, tries: list[reruns.Try]) -> str | None:
        if number == 0:
            return None
        failure = tries[-1].failure()
        name = classes.of(failure) if failure is not None else None
        mine = sum(attempt.why.startswith(self.name) for attempt in tries)
        if name not in self.classes or mine >= self.most:
            return None
        if self.delay:
            time.sleep(self.delay)
        item.add_marker(FRESH)  # on fresh engines, as without reuse
        return f"{self.name} {name} is retried ({mine + 1} of {self.most}, on fresh engines)"

    def verdict(self, item: pytest.Item, tries: list[reruns.Try]) -> reruns.Verdict:
        last = len(tries) - 1
        if tries[last].failed:
            return reruns.Verdict(0, f"it failed on each of {len(tries)} tries: its first failure counts")
        return reruns.Verdict(last, f"it passed on try {len(tries)}: flaky, and pass@1 counts it failed")


def pytest_configure(config: pytest.Config) -> None:
    settings = process_context(config).settings
    if settings.retry:
        reruns.add(config, ByClass(settings))
    if config.pluginmanager.has_plugin("rerunfailures") and not is_controller(config):
        config.pluginmanager.register(reruns.Marked(), "harness-rerunfailures")  # its tries, recorded


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and reruns.author_reruns(item):
        item.add_marker(FRESH)  # pytest-rerunfailures runs it again: on fresh engines, as a retry
    return report
