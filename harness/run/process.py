"""One phase as one process group: started, waited on with a timeout, and stopped whole."""

from __future__ import annotations

import os
import signal
import subprocess

INTERRUPT_GRACE_S = 10.0  # after a phase timeout: SIGINT lets pytest write its JUnit, then SIGKILL


def run_phase(command: list[str], env: dict, timeout_s: float | None) -> tuple[int, bool]:
    """Run one phase in its own process group; on timeout interrupt it, then kill the whole group."""
    process = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        return _exit_code(process.wait(timeout=timeout_s)), False
    except subprocess.TimeoutExpired:
        pass
    except KeyboardInterrupt:
        _stop(process)
        raise
    _stop(process)
    return _exit_code(process.returncode), True


def _stop(process: subprocess.Popen) -> None:
    """SIGINT first (pytest writes its JUnit and summary), SIGKILL for whatever is left of the group."""
    try:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=INTERRUPT_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)  # engine subprocesses outlive their pytest otherwise
    except ProcessLookupError:
        pass
    process.wait()


def _exit_code(returncode: int) -> int:
    """A process ended by a signal reads as the shell writes it (128 + signal number)."""
    return 128 - returncode if returncode < 0 else returncode
