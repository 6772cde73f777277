"""Reading a ledger directory back: every worker's events merged into one record per runner."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path


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


def events(path: Path):
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
        for event in events(path):
            kind = event.pop("event")
            if kind == "runner-start":
                record = {
                    **{k: v for k, v in event.items() if k != "t"},
                    "start": event["t"],
                    "startup_s": None,
                    "stop": None,
                    "teardown_s": None,
                    "mem_after_start": None,
                    "held_after_start": None,
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
                        startup_s=event.get("startup_s"),
                        mem_after_start=event.get("mem_after_start"),
                        held_after_start=event.get("held_after_start"),
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
