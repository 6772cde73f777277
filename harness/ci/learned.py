"""What a cell's last merged report decides for its generated CI jobs, for Buildkite and GitHub alike.

``harness ci buildkite --history DIR`` and ``harness ci matrix --history DIR`` read the same folder (the
cells' kept reports, ``DIR/<suite>-<platform>``, as the CI cache restores them) through this one module, so
the two CI systems write the same timeout and move the same cells' GPU-free tests to a CPU job; each
decision is one line on stderr.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from harness.ci import step_timeouts
from harness.ci.matrix import Cell, CiSettings
from harness.report import gpu_free_job, previous
from harness.report.gpu_free import GPU_PLATFORMS
from harness.report.previous import History


@dataclass(frozen=True)
class Decided:
    """A cell's job timeout (minutes) and whether its GPU-free tests get a CPU job of their own."""

    minutes: int
    moves: bool


def decide(cell: Cell, settings: CiSettings, parallelism: int, history: str | None, bound: int) -> Decided:
    """The cell's timeout from its history's durations (``harness.ci.step_timeouts``; ``bound`` is the
    most, and the value without a usable history) and its GPU-free move (``moving``). The cell's folder is
    read once, and only a report of the cell's own suite and platform counts: another suite's report
    left in the folder is no history of this cell."""
    kept = str(Path(history) / f"{cell.suite}-{cell.platform}") if history else None
    found = previous.first_usable(kept, cell.suite, (cell.platform,), what="--history")
    minutes, why = step_timeouts.for_cell(found, parallelism, bound)
    if history:
        print(f"harness: {cell.key} timeout_in_minutes {minutes}: {why}", file=sys.stderr)
    return Decided(minutes, moving(cell, settings, found))


def moving(cell: Cell, settings: CiSettings, history: History) -> bool:
    """Whether a cell's GPU-free tests get a CPU job: ``gpu_free_job`` on, a GPU cell, and its history
    (what the cache restored) listing some; the reason is one line on stderr."""
    if not settings.gpu_free_job or cell.platform not in GPU_PLATFORMS:
        return False
    moved = gpu_free_job.listed(history)
    print(f"harness: {cell.key} gpu_free_job: {moved.line}", file=sys.stderr)
    return bool(moved.tests)
