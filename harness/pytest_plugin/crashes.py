"""A test whose xdist worker died is a result, not work to hand to the next worker.

xdist's ``loadscope`` and ``loadfile`` schedulers put a crashed worker's whole work unit back in the queue,
the test it died in included: a test that ends its process (``os._exit``, SIGKILL, pytest-timeout's thread
method) then crash-loops fresh workers until xdist gives up, and the rest of its file never runs. These
schedulers mark the crashed test done before the unit goes back, so only the tests after it run again.
"""

from __future__ import annotations

import os
import time

import pytest
from xdist.scheduler import LoadFileScheduling, LoadScopeScheduling

REAP_WAIT_S = 2.0  # how long the controller waits to see a crashed worker's exit status


class _DropsCrashed:
    """``remove_node`` of xdist's scope schedulers, with the test the node died in marked completed."""

    def remove_node(self, node):
        workload = self.assigned_work.get(node, {})
        crashed = next((i for unit in workload.values() for i, done in unit.items() if not done), None)
        if crashed is None:
            return super().remove_node(node)
        for unit in workload.values():
            if crashed in unit:
                unit[crashed] = True
        super().remove_node(node)  # re-queues the tests of the unit that did not run yet
        return crashed  # xdist reports it (a failed test) and calls pytest_handlecrashitem


class DropCrashedScope(_DropsCrashed, LoadScopeScheduling):
    pass


class DropCrashedFile(_DropsCrashed, LoadFileScheduling):
    pass


def scheduler(config: pytest.Config, log):
    """The harness's scheduler for ``--dist loadscope`` / ``loadfile``; None leaves others to xdist."""
    kind = {"loadscope": DropCrashedScope, "loadfile": DropCrashedFile}.get(config.getvalue("dist"))
    return kind(config, log) if kind else None


def returncode(pid: int | None) -> int | None:
    """A dead child's exit status as the shell writes it, without reaping it (execnet still waits on it)."""
    if pid is None:
        return None
    deadline = time.monotonic() + REAP_WAIT_S
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        except ChildProcessError:  # already reaped, or not our child
            return None
        if info is not None:
            return info.si_status if info.si_code == os.CLD_EXITED else 128 + info.si_status
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)
