"""Reading a ledger directory back: every worker's events merged into one record per runner."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from harness.ledger.records import Finding, Record, Sample, TestResult, WorkerInfo


def started(records: list[Record]) -> list[Record]:
    """The records of runners that did start (a blocked or failed start is counted apart)."""
    return [r for r in records if r["outcome"] in ("started", "never-stopped")]


@dataclass
class Ledger:
    """The merged view of a ledger directory (all workers, all phases below it)."""

    records: list[Record] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    tests: list[TestResult] = field(default_factory=list)
    workers: list[WorkerInfo] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)


def events(path: Path) -> Iterator[dict[str, Any]]:
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
    for path in sorted(Path(directory).rglob("*.jsonl")):
        _merge(path, ledger)
    ledger.findings += [_never_stopped(r) for r in ledger.records if r["outcome"] == "never-stopped"]
    return ledger


# The events that are kept as they are, and where each goes.
_AS_IS = {"finding": "findings", "test": "tests", "worker": "workers", "memory": "samples"}


def _merge(path: Path, ledger: Ledger) -> None:
    """One worker file's events into ``ledger``; ids are per file (phases reuse worker names)."""
    by_id: dict[str, Record] = {}
    for event in events(path):
        kind = event.pop("event")
        if kind == "runner-start":
            by_id[event["id"]] = _record(event)
            ledger.records.append(by_id[event["id"]])
        elif kind in _ENDS and event.get("id") in by_id:
            by_id[event["id"]].update(_ENDS[kind](event))  # type: ignore[typeddict-item]
        elif kind in _AS_IS:
            getattr(ledger, _AS_IS[kind]).append(event)


def _record(start: dict[str, Any]) -> Record:
    """A runner's record from its ``runner-start`` event, not stopped (yet)."""
    fields = {k: v for k, v in start.items() if k != "t"}
    return cast(
        Record,
        {
            **fields,
            "start": start["t"],
            "startup_s": None,
            "stop": None,
            "teardown_s": None,
            "mem_after_start": None,
            "held_after_start": None,
            "mem_after_stop": None,
            "outcome": "never-stopped",
            "error": None,
            "holders": [],
        },
    )


# What each later event of a runner changes in its record.
_ENDS = {
    "runner-started": lambda e: {
        "startup_s": e.get("startup_s"),
        "mem_after_start": e.get("mem_after_start"),
        "held_after_start": e.get("held_after_start"),
    },
    "runner-failed": lambda e: {
        "startup_s": e.get("startup_s"),
        "outcome": "blocked" if e.get("blocked") else "failed",
        "error": e.get("error"),
        "holders": e.get("holders", []),
    },
    "runner-stopped": lambda e: {
        "stop": e["t"],
        "teardown_s": e.get("teardown_s"),
        "mem_after_stop": e.get("mem_after_stop"),
        "outcome": "started",
    },
}


def _never_stopped(record: Record) -> Finding:
    return {
        "type": "never-stopped",
        "t": record["start"],
        "runner": record["id"],
        "test": record.get("test"),
        "message": f"{record['kind']} runner {record['model']} started in {record.get('test')} "
        f"was never stopped (worker {record.get('worker')} ended or was killed)",
    }
