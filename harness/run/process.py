"""One phase as one process group: started, waited on with a timeout, and stopped whole.

The phase runs in its own session, so a signal to ``harness run``'s process group (a cancelled CI job:
SIGTERM, then SIGKILL after a grace period) never reaches pytest or its engines. ``harness run`` turns
SIGTERM, SIGHUP and SIGINT into ``Stopped`` while it runs, stops the phase's whole group itself and still
writes the report.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass

INTERRUPT_GRACE_S = 10.0  # after a phase timeout: SIGINT lets pytest write its JUnit, then SIGKILL
STOP_GRACE_S = 3.0  # after SIGTERM/SIGHUP: CI kills us about 10 s after its SIGTERM; the report comes first
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
REPORT_MARGIN_S = 600.0  # phases end this long before CI's deadline: stop, write the report, upload it


def phase_timeout(timeout_s: float | None, deadline: float | None, now: float) -> float | None:
    """The phase's own timeout, cut so the phase ends REPORT_MARGIN_S before CI's deadline (1 s at least)."""
    if deadline is None:
        return timeout_s
    left = max(deadline - REPORT_MARGIN_S - now, 1.0)
    return left if timeout_s is None else min(timeout_s, left)


class Stopped(Exception):
    """``harness run`` got SIGTERM, SIGHUP or SIGINT."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True)
class Ended:
    """How one pytest process ended: its exit code, past its timeout, or stopped by a signal to us."""

    code: int
    timed_out: bool = False
    stopped: Stopped | None = None


@contextlib.contextmanager
def stop_signals():
    """SIGTERM, SIGHUP and SIGINT raise ``Stopped`` (once; a repeat is ignored while we clean up)."""

    def handler(signum, frame):
        for number in STOP_SIGNALS:
            signal.signal(number, signal.SIG_IGN)
        raise Stopped(signum)

    previous = {number: signal.signal(number, handler) for number in STOP_SIGNALS}
    try:
        yield
    finally:
        for number, action in previous.items():
            signal.signal(number, action)


@contextlib.contextmanager
def ignore_stop_signals():
    """While the report is written: a signal then would leave it half done."""
    previous = {number: signal.signal(number, signal.SIG_IGN) for number in STOP_SIGNALS}
    try:
        yield
    finally:
        for number, action in previous.items():
            signal.signal(number, action)


def run_phase(command: list[str], env: dict, timeout_s: float | None) -> Ended:
    """Run one phase in its own process group; on timeout or ``Stopped`` stop the whole group.

    Whatever of the group outlives pytest (an engine process a test leaked) is killed as the phase ends.
    """
    process = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        return Ended(_exit_code(process.wait(timeout=timeout_s)))
    except subprocess.TimeoutExpired:
        return Ended(_exit_code(_interrupt(process, INTERRUPT_GRACE_S)), timed_out=True)
    except Stopped as stopped:
        return Ended(_exit_code(_interrupt(process, STOP_GRACE_S)), stopped=stopped)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def _interrupt(process: subprocess.Popen, grace_s: float) -> int:
    """SIGINT to the group (pytest writes its JUnit and summary), SIGKILL when it is not gone in time."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    try:
        return process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return process.wait()


def _exit_code(returncode: int) -> int:
    """A process ended by a signal reads as the shell writes it (128 + signal number)."""
    return 128 - returncode if returncode < 0 else returncode
