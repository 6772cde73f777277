"""The xdist controller's hooks: the ledger directory handed to every worker, the collected tests listed
once, and workers that crash recorded.

A crashed worker (SIGKILL, ``os._exit``, pytest-timeout's thread method) cannot say so itself; the
controller writes a ``crash`` event naming the test and how the worker ended into ``controller.jsonl``,
and its scheduler drops that test from its work unit, so the replacement worker does not run it again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import ledger

LEDGER_DIR = "harness_ledger_dir"  # workerinput key: the controller's ledger directory


class Controller:
    """Registered in every session that has xdist; its hooks are called in the controller only."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.writer: ledger.LedgerWriter | None = None
        self.listed = False

    def _write(self, event: str, **fields) -> None:
        self.writer = self.writer or ledger.LedgerWriter(self.directory, worker="controller")
        self.writer.write(event, **fields)

    def pytest_configure_node(self, node) -> None:
        node.workerinput[LEDGER_DIR] = str(self.directory)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        if not self.listed:  # every worker collects the same ids (xdist checks); one list is enough
            self.listed = True
            self._write("collected", sync=False, tests=list(ids))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log):
        from harness.pytest_plugin import crashes  # xdist's schedulers: imported by the controller only

        return crashes.scheduler(config, log)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report, sched) -> None:
        """The ``crash`` event, saying whether the test is quarantined (then every output reports the crash
        as its xfail, which gates nothing, as pytest's exit status does)."""
        from harness.pytest_plugin import crashes, quarantined

        worker = report.node.gateway.id
        how = ledger.ended(crashes.returncode(_last_pid(self.directory / f"{worker}.jsonl")))
        held = quarantined.held(report) is not None
        self._write("crash", test=crashitem, worker=worker, how=how, quarantined=held)


def _last_pid(path: Path) -> int | None:
    """The pid of the last process that wrote ``path`` (its ``worker`` event)."""
    pids = [e.get("pid") for e in ledger.events(path) if e["event"] == "worker"]
    return pids[-1] if pids and isinstance(pids[-1], int) else None
