"""The GPU-free tests' CPU job, in the session (``HARNESS_GPU_FREE_TESTS``, which ``harness run`` sets from
the history under ``[tool.harness.ci] gpu_free_job``): a GPU step's session deselects the listed tests; the
CPU job's keeps only them, and a listed test that starts a runner, or has one alive while it runs, fails
with the report that listed it and what it started: it needs a GPU, and goes back to the GPU steps (only
tests that pass here stay moved: ``harness.report.gpu_free_job``). A test that reaches for a device fails
on the CPU agent by itself; its failure says why it ran here.
"""

from __future__ import annotations

import os

import pytest

from harness.config.variables import GPU_FREE_TESTS
from harness.errors import HarnessError
from harness.pytest_plugin.session import process_context


class GpuFreeJob:
    """One session's list: ``deselect`` it, or run ``only`` it and fail a test that used a runner."""

    def __init__(self, listing: dict) -> None:
        self.mode, self.source = listing["mode"], listing["source"]
        self.tests = frozenset(listing["tests"])
        self.starts = 0  # the process's runner starts when the running test began

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        wanted = self.mode == "only"
        kept = [item for item in items if (item.nodeid in self.tests) is wanted]
        if len(kept) < len(items):
            gone = [item for item in items if (item.nodeid in self.tests) is not wanted]
            config.hook.pytest_deselected(items=gone)
            items[:] = kept

    def pytest_report_header(self) -> str:
        if self.mode == "only":
            return f"harness: the {len(self.tests)} GPU-free tests listed in {self.source}, on the CPU"
        return f"harness: {len(self.tests)} GPU-free tests listed in {self.source} run on their CPU job"

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> None:
        self.starts = process_context(item.config).starts

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if self.mode != "only" or report.when != "call":
            return report
        used = _runners(item.config, self.starts)
        if used:
            why = (
                f"harness: {item.nodeid} was listed GPU-free in {self.source} and runs on the CPU job for "
                f"that, but {used} here: it needs a GPU, so it fails on this job and goes back to the GPU "
                "steps next build"
            )
            if report.passed:
                report.outcome, report.longrepr = "failed", why
            else:
                report.sections.append(("harness: GPU-free job", why))
        elif report.failed:
            report.sections.append(
                ("harness: GPU-free job", f"listed GPU-free in {self.source}: run on the CPU job for that")
            )
        return report


def _runners(config: pytest.Config, before: int) -> str | None:
    """What the running test started or held: runners started since it began, or alive now (a fixture's);
    None where neither."""
    context = process_context(config)
    if context.starts == 0:  # no runner ever started in this process: nothing alive either
        return None
    live = [holder.label for holder in context.holders.on()]
    stopped = [run.label() for run in context.unchecked]  # stopped during the test, not checked yet
    started = context.starts - before
    if not started and not live:
        return None
    named = ", ".join(dict.fromkeys([*stopped, *live])) or "a runner"
    return f"it started {started} runner(s) ({named})" if started else f"{named} was alive while it ran"


def load(env=os.environ) -> GpuFreeJob:
    """The list ``harness run`` wrote, through the one loader (a FIFO, a device or a directory is refused
    without blocking); a file it did not write is the session's usage error, one line."""
    from harness.report.store import gpu_free_list  # noqa: PLC0415 -- its schema loads only here

    try:
        listing = gpu_free_list(env[GPU_FREE_TESTS])
    except HarnessError as error:
        raise pytest.UsageError(f"{GPU_FREE_TESTS}: {error}") from None
    return GpuFreeJob(dict(listing))
