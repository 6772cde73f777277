"""A phase whose pytest died under a test goes on with the tests it did not reach.

In a serial phase the test that ends its process (``os._exit``, SIGKILL) takes pytest with it; under
xdist, workers are replaced until ``--max-worker-restart``. Either way the death is recorded as a
``crash`` event for the test it happened in (an ``error`` in the report), and pytest runs again on the
collected tests that have no result yet, until every one has one, an attempt makes no progress, the
phase's time is up or ``harness run`` is stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harness import ledger
from harness.report.outcomes import worst
from harness.report.store import write_atomic
from harness.run.process import Ended, run_phase

MAX_ATTEMPTS = 20
TESTS_FAILED = 1  # pytest.ExitCode.TESTS_FAILED: a crash, once recorded, is a failed test like any other


def run_resuming(
    select: Callable[[tuple[str, ...] | None], list[str]],
    command: list[str],
    env: dict,
    timeout_s: float | None,
    out: Path,
    phase: str,
    keep: Sequence[int] = (),
    quarantined: Callable[[str], bool] | None = None,
) -> dict:
    """Run a phase (``command`` + ``select(paths)``), resumed after crashes; its ``phases.json`` fields.
    A crash of a ``quarantined`` test only does not fail the phase (its failure would not have)."""
    ledger_dir = out / "ledger" / phase
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    codes: list[int] = []
    paths: tuple[str, ...] | None = None
    left: list[str] | None = None
    crashes = 0
    for attempt in range(1, MAX_ATTEMPTS + 1):
        junit = out / "junit" / (f"{phase}.xml" if attempt == 1 else f"{phase}+{attempt}.xml")
        args = [*select(paths), f"--junitxml={junit}", f"--harness-ledger-dir={ledger_dir}"]
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        ended = run_phase([*command, *args], env, remaining, keep)
        crashed = _record_crashes(ledger_dir, ended, quarantined)
        before, crashes = crashes, _crashes(ledger_dir)
        code = ended.code
        if crashed and not (ended.timed_out or ended.stopped):  # its pytest died: its code says nothing
            code = TESTS_FAILED if _gating_failure(ledger_dir) else 0
        codes.append(code)
        if ended.timed_out or ended.stopped or crashes == before:
            break  # only a crash cut the phase short; -x or --maxfail stop it on purpose
        previous, left = left, _left(ledger_dir)
        if not left or left == previous:
            break
        lines = _arguments(left, list(ledger.read(ledger_dir).collected))
        paths = (f"@{_args_file(out, phase, attempt, lines)}",)  # one argument: pytest reads the file
    return {
        "exit_code": codes[0] if len(codes) == 1 else worst(codes),  # a crash that gates made one 1
        "timed_out": ended.timed_out,
        "stopped": ended.stopped and str(ended.stopped),
        "attempts": len(codes),
    }


def _record_crashes(
    ledger_dir: Path, ended: Ended, quarantined: Callable[[str], bool] | None = None
) -> list[str]:
    """A ``crash`` event for each test this attempt started and never finished, saying whether the test is
    ``quarantined`` (the report then records the crash as its xfail); those tests."""
    if ended.stopped:
        how = f"was stopped: harness run got {ended.stopped}"
    elif ended.timed_out:
        how = "was stopped at the phase timeout"
    else:
        how = ledger.ended(ended.code)
    tests = ledger.unfinished(ledger_dir) if ledger_dir.is_dir() else []
    if tests:
        writer = ledger.LedgerWriter(ledger_dir, worker="harness")
        for test in tests:
            held = bool(quarantined and quarantined(test))
            writer.write("crash", test=test, worker="harness", how=how, quarantined=held)
        writer.close()
    return tests


def _gating_failure(ledger_dir: Path) -> bool:
    """Whether a test of the phase failed or errored: a quarantined one's failure is pytest's xfail and its
    crash the same (its ``crash`` event says quarantined), both recorded as skipped."""
    return any(test["outcome"] in ("failed", "error") for test in ledger.read(ledger_dir).tests)


def _crashes(ledger_dir: Path) -> int:
    return sum(1 for test in ledger.read(ledger_dir).tests if test.get("crash"))


def _left(ledger_dir: Path) -> list[str]:
    """Collected tests of the phase without a result (run, failed or crashed), in collection order."""
    merged = ledger.read(ledger_dir)
    done = {test["nodeid"] for test in merged.tests}
    return [test for test in merged.collected if test not in done]


def _arguments(left: list[str], collected: list[str]) -> list[str]:
    """pytest's arguments for the tests ``left``: their node ids, but pytest refuses any path argument
    holding ``[`` (it reads it as parametrization): a file such as ``test_grid[1].py`` is reached through
    the nearest folder without one, the collected tests there that ran already deselected."""
    folders = sorted({_plain_folder(t.split("::")[0]) for t in left if "[" in t.split("::")[0]})

    def inside(test: str) -> bool:
        return any(folder in (".", "") or test.startswith(folder + "/") for folder in folders)

    remaining = set(left)
    return [
        *(t for t in left if not inside(t)),
        *folders,
        *(f"--deselect={t}" for t in collected if inside(t) and t not in remaining),
    ]


def _plain_folder(path: str) -> str:
    folder = path.rpartition("/")[0]
    while "[" in folder:
        folder = folder.rpartition("/")[0]
    return folder or "."


def _args_file(out: Path, phase: str, attempt: int, tests: list[str]) -> Path:
    path = out / "resume" / f"{phase}+{attempt + 1}.args"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "".join(f"{test}\n" for test in tests))
    return path
