"""The GPU-free tests' CPU job (``[tool.harness.ci] gpu_free_job``): which tests move off the GPU.

The list comes from the cell's history, the same report the GPU step and the CPU job both restore (so both
read one list): the tests its ``gpu_free`` names (no runner, no device memory on the GPU), and the tests
that passed on the CPU job of that build (its report, kept beside the history as ``gpu-free/report.json``
by the cell's merge step): a test that moved stays moved while it passes there, and one that failed there
(a runner start, a device it needed) goes back to the GPU steps (``harness.report.previous`` reads both,
once). No usable history: nothing moves.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import HarnessError
from harness.report.gpu_free import GPU_PLATFORMS
from harness.report.previous import KEPT, History

__all__ = ["KEPT", "MODES", "Moved", "listed", "mode"]

MODES = ("deselect", "only")  # a GPU step's, the CPU job's


@dataclass(frozen=True)
class Moved:
    """The tests that run on the CPU job, the history that listed them and its GPU platform, and a line
    saying what moves or why nothing does."""

    tests: list[str]
    source: str | None
    platform: str | None
    line: str


def listed(history: History | None) -> Moved:
    """The GPU-free tests of the run's history (``harness.report.previous.first_usable`` picked it, of the
    suite and a platform the run accepts); nothing moves without a usable history of a GPU platform."""
    if history is None or history.note is not None:
        why = history.note.removeprefix("no history: ") if history and history.note else "no history given"
        return Moved([], None, None, f"nothing moves to the GPU-free job: no history ({why})")
    if history.platform not in GPU_PLATFORMS:
        why = f"{history.source} is of {history.platform!r}, not a GPU platform"
        return Moved([], None, None, f"nothing moves to the GPU-free job: no history ({why})")
    tests = list(history.gpu_free)
    return Moved(
        tests, history.source, history.platform, f"{len(tests)} GPU-free tests listed in {history.source}"
    )


def mode(given: str | None) -> str | None:
    """``--gpu-free`` / ``HARNESS_GPU_FREE``: one of ``MODES``, or None (empty: off)."""
    if not given:
        return None
    if given not in MODES:
        raise HarnessError(f"HARNESS_GPU_FREE {given!r}: expected one of {', '.join(MODES)}")
    return given
