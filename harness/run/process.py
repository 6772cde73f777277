"""One phase as one process group under a keeper: started, waited on with a timeout, and stopped whole.

The phase runs in its own session, so a signal to ``harness run``'s process group (a cancelled CI job:
SIGTERM, then SIGKILL after a grace period) never reaches pytest or its engines. ``harness run`` turns
SIGTERM, SIGHUP and SIGINT into ``Stopped`` while it runs, stops the phase's whole group itself and still
writes the report. Each phase runs under ``harness.run.watchdog``, which ends every process the phase
started when the phase ends or ``harness run`` dies, SIGKILL included.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from harness.run.watchdog import NOT_STARTED

INTERRUPT_GRACE_S = 10.0  # after a phase timeout: SIGINT lets pytest write its JUnit, then SIGKILL
STOP_GRACE_S = 3.0  # after SIGTERM/SIGHUP: CI kills us about 10 s after its SIGTERM; the report comes first
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
KEEPER_GRACE_S = 60.0  # the keeper kills and reaps the phase's processes; past this it is killed itself
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


class Kept:
    """A command under ``harness.run.watchdog``, in a session of its own; ``end`` kills all it started.

    The keeper reads a pipe whose write end only this object holds: closing it, or this process dying,
    ends the command and every descendant. ``keep`` are descriptors the keeper holds until then (the run
    directory's lock).
    """

    def __init__(self, command: list[str], env: dict, keep: Sequence[int] = (), **popen):
        read, self._write = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "harness.run.watchdog", str(read), *command],
                env=env,
                start_new_session=True,
                pass_fds=(read, *keep),
                **popen,
            )
        except OSError:
            os.close(self._write)
            raise
        finally:
            os.close(read)

    def wait(self, timeout_s: float | None) -> int:
        return self.process.wait(timeout=timeout_s)

    def interrupt(self) -> None:
        """SIGINT to the group (the keeper ignores it): pytest writes its JUnit and summary."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGINT)

    def end(self) -> int:
        """Every process of the command ended; its exit status."""
        if self._write >= 0:
            os.close(self._write)
            self._write = -1
        try:
            return self.process.wait(timeout=KEEPER_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait()


def run_phase(command: list[str], env: dict, timeout_s: float | None, keep: Sequence[int] = ()) -> Ended:
    """Run one phase under a keeper; on timeout or ``Stopped`` interrupt it, then end all it started.

    Whatever of the phase outlives pytest (an engine process a test leaked, in its own session too) is
    killed as the phase ends. A phase that cannot be started ends with ``NOT_STARTED``.
    """
    try:
        kept = Kept(command, env, keep)
    except OSError:
        return Ended(NOT_STARTED)
    try:
        return Ended(_exit_code(kept.wait(timeout_s)))
    except subprocess.TimeoutExpired:
        return Ended(_exit_code(_interrupt(kept, INTERRUPT_GRACE_S)), timed_out=True)
    except Stopped as stopped:
        return Ended(_exit_code(_interrupt(kept, STOP_GRACE_S)), stopped=stopped)
    finally:
        kept.end()


def _interrupt(kept: Kept, grace_s: float) -> int:
    """SIGINT to the group (pytest writes its JUnit and summary); everything killed when not gone in time."""
    kept.interrupt()
    try:
        return kept.wait(grace_s)
    except subprocess.TimeoutExpired:
        return kept.end()


def _exit_code(returncode: int) -> int:
    """A process ended by a signal reads as the shell writes it (128 + signal number)."""
    return 128 - returncode if returncode < 0 else returncode
