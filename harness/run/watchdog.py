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

import signal

# harness run sends SIGINT to this process group so that pytest writes its JUnit: it is not for us, from
# the first moment on. A handler rather than SIG_IGN: an exec resets handlers, so COMMAND gets the default.
signal.signal(signal.SIGINT, lambda signum, frame: None)

import contextlib  # noqa: E402
import ctypes  # noqa: E402
import os  # noqa: E402
import select  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
NOT_STARTED = 127  # the shell's "command not found": COMMAND could not be executed
POLL_S = 0.05  # how soon the keeper sees COMMAND exit
END_WITHIN_S = 30.0  # killed processes are gone at once; a process stuck in the kernel is waited on this long


def main(argv: list[str]) -> int:
    pipe, command = int(argv[0]), argv[1:]
    if not _prctl(PR_SET_CHILD_SUBREAPER, 1):
        print(
            "harness: warning: no PR_SET_CHILD_SUBREAPER: a child in its own session may outlive the phase",
            file=sys.stderr,
        )
    try:
        process = subprocess.Popen(command, preexec_fn=_dies_with(os.getpid()))  # noqa: PLW1509
    except OSError as error:
        print(f"harness: error: cannot start {command[0]!r}: {error.strerror}", file=sys.stderr)
        return NOT_STARTED
    while process.poll() is None:  # a poll, not pidfd_open: CI agents run kernels older than 5.3
        ready, _, _ = select.select([pipe], [], [], POLL_S)
        if ready and not os.read(pipe, 512):
            break  # harness run closed the pipe, or is gone
    _end_descendants(process)
    code = process.wait()
    _end_descendants(process)
    return 128 - code if code < 0 else code


def _end_descendants(process: subprocess.Popen) -> None:
    """SIGKILL to every live descendant until none is left; orphans reparented here are reaped, all but
    COMMAND (whose status ``Popen.wait`` reads)."""
    import psutil  # here, not at the top: the keeper starts within the phase's time

    me = psutil.Process()
    deadline = time.monotonic() + END_WITHIN_S
    while time.monotonic() < deadline:
        alive = []
        for descendant in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if descendant.status() != psutil.STATUS_ZOMBIE:
                    descendant.kill()
                    alive.append(descendant)
        for child in me.children():
            if child.pid != process.pid:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(child.pid, os.WNOHANG)
        if not alive:
            return
        time.sleep(0.02)


def _dies_with(parent: int):
    """COMMAND's pre-exec step: SIGKILL when this process dies (and at once if it already has)."""

    def step() -> None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(NOT_STARTED)

    return step


def _prctl(option: int, value: int) -> bool:
    """Linux's prctl(2); False where it is missing or refused (the keeper still ends what it sees)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except AttributeError:
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
