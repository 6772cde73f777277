"""The GPU-free tests' CPU job (``[tool.harness.ci] gpu_free_job``): which tests move off the GPU.

The list comes from the cell's history, the same report the GPU step and the CPU job both restore (so both
read one list): the tests its ``gpu_free`` names (no runner, no device memory on the GPU), and the tests
that passed on the CPU job of that build (its report, kept beside the history as ``gpu-free/report.json``
by the cell's merge step): a test that moved stays moved while it passes there, and one that failed there
(a runner start, a device it needed) goes back to the GPU steps. No usable history: nothing moves.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError
from harness.report.gpu_free import GPU_PLATFORMS
from harness.report.store import load

MODES = ("deselect", "only")  # a GPU step's, the CPU job's
KEPT = "gpu-free"  # the CPU job's report, kept in the history's folder (merge step)


@dataclass(frozen=True)
class Moved:
    """The tests that run on the CPU job, the history that listed them and its GPU platform, and a line
    saying what moves or why nothing does."""

    tests: list[str]
    source: str | None
    platform: str | None
    line: str


def listed(places: str | None, suite: str, platform: str | None) -> Moved:
    """The GPU-free tests of the first usable history among ``places`` (``:``-separated, as
    ``HARNESS_HISTORY``). ``platform``: the GPU platform the history must be of (None: any GPU platform,
    as the CPU job reads its GPU cell's)."""
    why = []
    for place in [part for part in (places or "").split(os.pathsep) if part]:
        try:
            tests, found = _of(Path(place), suite, platform)
        except HarnessError as error:
            why.append(str(error))
            continue
        return Moved(tests, place, found, f"{len(tests)} GPU-free tests listed in {place}")
    reasons = "; ".join(why) or "no history given"
    return Moved([], None, None, f"nothing moves to the GPU-free job: no history ({reasons})")


def _of(place: Path, suite: str, platform: str | None) -> tuple[list[str], str]:
    report = load(place)
    found = (report.get("suite"), report["platform"].get("name"))
    wanted = (platform,) if platform else GPU_PLATFORMS
    if found[0] != suite or found[1] not in wanted:
        raise HarnessError(f"{place} is of suite {found[0]!r} on {found[1]!r}, not {suite!r} on a GPU")
    section = report.get("gpu_free")
    tests = {each["nodeid"] for each in (section["tests"] if section else [])}
    kept = (place if place.is_dir() else place.parent) / KEPT
    if (kept / "report.json").is_file():
        try:
            cpu = load(kept)
        except HarnessError:
            cpu = None  # a broken copy: the GPU's own judgement stands
        if cpu is not None and cpu.get("suite") == suite:
            tests |= {t["nodeid"] for t in cpu["tests"] if t["outcome"] == "passed"}
            tests -= {t["nodeid"] for t in cpu["tests"] if t["outcome"] in ("failed", "error")}
    return sorted(tests), str(found[1])


def mode(given: str | None) -> str | None:
    """``--gpu-free`` / ``HARNESS_GPU_FREE``: one of ``MODES``, or None (empty: off)."""
    if not given:
        return None
    if given not in MODES:
        raise HarnessError(f"HARNESS_GPU_FREE {given!r}: expected one of {', '.join(MODES)}")
    return given
