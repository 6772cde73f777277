"""The crash-safe runner ledger: one JSON-lines file per worker, merged into records when read.

Each event is flushed and fsynced before the code it describes goes on, so a worker killed at any point
(SIGKILL, ``os._exit`` from pytest-timeout) loses nothing already written. Readers tolerate a torn last
line and report a runner that started but never stopped as ``never-stopped``.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class LedgerWriter:
    """Appends events to ``<directory>/<worker>.jsonl``; one writer per process (``worker``: ``gw0``...,
    ``main`` outside xdist, ``controller`` for what only the xdist controller sees)."""

    def __init__(self, directory: str | os.PathLike, worker: str):
        self.worker = worker
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / f"{self.worker}.jsonl"
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
        if self._file.tell() and not self.path.read_bytes().endswith(b"\n"):
            self._file.write("\n")  # a predecessor killed mid-line: keep our first event off its torn line
        self._lock = threading.Lock()  # the memory sampler writes from its own thread
        self._ids = itertools.count(self._next_id_number())

    def _next_id_number(self) -> int:
        """A restarted xdist worker appends to its predecessor's file: keep runner ids unique."""
        return 1 + sum(1 for r in _events(self.path) if r.get("event") == "runner-start")

    def new_id(self) -> str:
        return f"{self.worker}-{next(self._ids)}"

    def write(self, event: str, *, sync: bool = True, **fields: Any) -> dict:
        """Write one event; returns it as written.

        The flush alone hands the line to the kernel, which keeps it through SIGKILL and ``os._exit``;
        ``sync`` also fsyncs it to survive a host crash. Runner events sync; per-test events, thousands per
        run, only flush (an fsync each doubled the wall of 2000 trivial tests).
        """
        record = {"event": event, "t": time.time(), **fields}
        line = json.dumps(record, default=str) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()
            if sync:
                os.fsync(self._file.fileno())
        return record

    def close(self) -> None:
        self._file.close()


def started(records: list[dict]) -> list[dict]:
    """The records of runners that did start (a blocked or failed start is counted apart)."""
    return [r for r in records if r["outcome"] in ("started", "never-stopped")]


@dataclass
class Ledger:
    """The merged view of a ledger directory (all workers, all phases below it)."""

    records: list[dict] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)
    tests: list[dict] = field(default_factory=list)
    workers: list[dict] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)  # ``memory`` events: {"t", "used": {uuid: bytes}}


def _events(path: Path):
    """The events of one file; a line that is not JSON (a write torn by a kill) is skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict) and "event" in event:
            yield event


def read(directory: str | os.PathLike) -> Ledger:
    """Merge every ``*.jsonl`` below ``directory`` into records, findings, tests, workers and samples."""
    ledger = Ledger()
    by_id: dict[tuple[Path, str], dict] = {}
    for path in sorted(Path(directory).rglob("*.jsonl")):
        for event in _events(path):
            kind = event.pop("event")
            if kind == "runner-start":
                record = {
                    **{k: v for k, v in event.items() if k != "t"},
                    "start": event["t"],
                    "startup_s": None,
                    "stop": None,
                    "teardown_s": None,
                    "mem_after_start": None,
                    "mem_after_stop": None,
                    "outcome": "never-stopped",
                    "error": None,
                    "holders": [],
                }
                # phases reuse worker names (main-1 in two phase dirs): key by file and id
                by_id[(path, event["id"])] = record
                ledger.records.append(record)
            elif kind in ("runner-started", "runner-failed", "runner-stopped"):
                record = by_id.get((path, event.get("id")))
                if record is None:
                    continue
                if kind == "runner-started":
                    record.update(
                        startup_s=event.get("startup_s"), mem_after_start=event.get("mem_after_start")
                    )
                elif kind == "runner-failed":
                    record.update(
                        startup_s=event.get("startup_s"),
                        outcome="blocked" if event.get("blocked") else "failed",
                        error=event.get("error"),
                        holders=event.get("holders", []),
                    )
                else:
                    record.update(
                        stop=event["t"],
                        teardown_s=event.get("teardown_s"),
                        mem_after_stop=event.get("mem_after_stop"),
                        outcome="started",
                    )
            elif kind == "finding":
                ledger.findings.append(event)
            elif kind == "test":
                ledger.tests.append(event)
            elif kind == "worker":
                ledger.workers.append(event)
            elif kind == "memory":
                ledger.samples.append(event)
    for record in ledger.records:
        if record["outcome"] == "never-stopped":
            ledger.findings.append(
                {
                    "type": "never-stopped",
                    "t": record["start"],
                    "runner": record["id"],
                    "test": record.get("test"),
                    "message": f"{record['kind']} runner {record['model']} started in {record.get('test')} "
                    f"was never stopped (worker {record.get('worker')} ended or was killed)",
                }
            )
    return ledger
