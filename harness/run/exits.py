"""``harness run``'s exit code from its phases: what CI can act on, not pytest's own numbers.

0 passed (a phase with no tests is not a failure); 1 tests failed (a failed or errored test, a collection
error, a crashed worker); 2 bad input (pytest's usage error: the arguments after ``--``); 3 a phase stopped
at its timeout; 4 a harness fault (pytest's INTERNALERROR, a phase that could not be started); 128 + N
when ``harness run`` was stopped by signal N. The worst phase's code is the run's. docs/exit-codes.md
lists them for users.
"""

from __future__ import annotations

from harness.report.outcomes import NO_TESTS
from harness.run.watchdog import NOT_STARTED

PASSED, FAILED, BAD_INPUT, TIMED_OUT, FAULT = 0, 1, 2, 3, 4
# pytest.ExitCode → ours: INTERRUPTED (2) is what pytest says for a collection error
_PYTEST = {0: PASSED, 1: FAILED, 2: FAILED, 3: FAULT, 4: BAD_INPUT, NO_TESTS: PASSED, NOT_STARTED: FAULT}


def phase_exit(code: int, timed_out: bool) -> int:
    """One phase's code in ``harness run``'s terms; a process a signal ended is a crashed test worker."""
    if timed_out:
        return TIMED_OUT
    return _PYTEST.get(code, FAILED)


def run_exit(phases: list[dict]) -> int:
    """The worst phase's code (each from its ``phases.json`` entry); 0 when no phase ran."""
    return max((phase_exit(p["exit_code"], p["timed_out"]) for p in phases), default=PASSED)
