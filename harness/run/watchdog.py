"""The keeper of one phase: ``python -m harness.run.watchdog FD COMMAND...`` runs COMMAND and, when it ends,
ends everything it started.

``harness run`` may die by SIGKILL (the OOM killer, ``docker kill``, ``timeout -s KILL``), and then none of
its code runs to stop its phase. This process stands between the two: it reads a pipe whose one write end
``harness run`` holds, so the read gives end-of-file the moment ``harness run`` is gone or closes it to end
the phase. It is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so whatever the phase starts, a child in
its own session included, stays its descendant when its parent dies. When the pipe closes or COMMAND exits,
it kills every descendant, reaps them and exits with COMMAND's status (128 + N for signal N; 127 when
COMMAND could not be started). COMMAND gets ``PR_SET_PDEATHSIG``, so it also dies with this process. The run
directory's lock, passed down by ``harness run``, is held here until every process of the phase is gone:
no stale writer can touch a later run's files.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import time

import psutil

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
NOT_STARTED = 127  # the shell's "command not found": COMMAND could not be executed
END_WITHIN_S = 30.0  # killed processes are gone at once; a process stuck in the kernel is waited on this long


def main(argv: list[str]) -> int:
    pipe, command = int(argv[0]), argv[1:]
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    # harness run sends SIGINT to this process group so that pytest writes its JUnit: it is not for us.
    # A handler rather than SIG_IGN: an exec resets handlers, so COMMAND gets SIGINT's default again.
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        process = subprocess.Popen(command, preexec_fn=_dies_with(os.getpid()))  # noqa: PLW1509
    except OSError as error:
        print(f"harness: error: cannot start {command[0]!r}: {error.strerror}", file=sys.stderr)
        return NOT_STARTED
    pidfd = os.pidfd_open(process.pid)
    while True:
        ready, _, _ = select.select([pipe, pidfd], [], [])
        if pidfd in ready or not os.read(pipe, 512):
            break  # COMMAND exited, or harness run closed the pipe (or is gone)
    _end_descendants(process)
    code = process.wait()
    _end_descendants(process)
    return 128 - code if code < 0 else code


def _end_descendants(process: subprocess.Popen) -> None:
    """SIGKILL to every live descendant until none is left; orphans reparented here are reaped."""
    me = psutil.Process()
    deadline = time.monotonic() + END_WITHIN_S
    while time.monotonic() < deadline:
        alive = [p for p in me.children(recursive=True) if _running(p)]
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()
        _reap(process.pid)
        if not alive:
            return
        time.sleep(0.02)


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _reap(keep: int) -> None:
    """Collect every exited child but COMMAND (whose status ``Popen.wait`` reads)."""
    for child in psutil.Process().children():
        if child.pid != keep:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(child.pid, os.WNOHANG)


def _dies_with(parent: int):
    """COMMAND's pre-exec step: SIGKILL when this process dies (and at once if it already has)."""

    def step() -> None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(NOT_STARTED)

    return step


def _prctl(option: int, value: int) -> None:
    if ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
