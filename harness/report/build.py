"""The report dict of a run directory: its phases, tests, runner records, findings and tallies."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

from harness.errors import HarnessError, ReportError
from harness.ledger.reader import read as read_ledger
from harness.ledger.reader import started
from harness.platform import detect
from harness.report import advisor
from harness.report.environment import environment, versions
from harness.report.schema import VERSION
from harness.report.store import json_object


def build(run_dir: Path, env: Mapping[str, str]) -> dict:
    """The report dict of a run directory, read from ``phases.json`` and the per-phase ledgers."""
    meta = _phases_file(run_dir)
    ledger_root = run_dir / "ledger"
    names = [phase["name"] for phase in meta["phases"]]
    if ledger_root.is_dir():
        names += sorted(p.name for p in ledger_root.iterdir() if p.is_dir() and p.name not in names)
    if not names and not (run_dir / "phases.json").exists():
        raise ReportError(f"{run_dir} is not a run directory (no phases.json, no ledger/)")

    records, findings, tests, workers, samples = [], [], [], [], []
    for name in names:
        directory = ledger_root / name
        if not directory.is_dir():
            continue
        ledger = read_ledger(directory)
        # A plain pytest run has no HARNESS_PHASE; the directory names the phase then.
        for item in (*ledger.records, *ledger.tests, *ledger.workers, *ledger.findings):
            if item.get("phase") is None:
                item["phase"] = name
        records += ledger.records
        findings += ledger.findings
        tests += ledger.tests
        workers += ledger.workers
        samples += ledger.samples

    by_phase = {phase["name"]: phase for phase in meta["phases"]}
    for phase in meta["phases"]:
        if phase.get("timed_out"):
            findings.append(
                {
                    "type": "timeout",
                    "t": phase["started"] + phase["wall_s"],
                    "phase": phase["name"],
                    "message": f"phase {phase['name']} ran past its timeout ({phase['wall_s']:.0f} s) "
                    "and was stopped; its remaining tests did not run",
                }
            )
    phases = []
    for name in names:
        phase = dict(by_phase.get(name, {"name": name, "started": None, "wall_s": None, "exit_code": None}))
        phase["outcomes"] = dict(Counter(t["outcome"] for t in tests if t["phase"] == name))
        phases.append(phase)

    return {
        "version": VERSION,
        "generated": time.time(),
        "suite": meta.get("suite"),
        "shard": meta.get("shard"),
        "started": meta.get("started"),
        "platform": {"name": meta.get("platform"), "reason": meta.get("platform_reason")},
        "devices": devices(meta.get("platform"), records, workers, env),
        "versions": versions(Path.cwd()),
        "environment": environment(env),
        "phases": phases,
        "tests": tests,
        "records": records,
        "findings": findings,
        "workers": workers,
        "samples": sorted(samples, key=lambda sample: sample["t"]),
        "starts": starts(records),
        "files": files(tests),
        "advice": advisor.advise(records),
    }


def _phases_file(run_dir: Path) -> dict:
    """``phases.json``, or an empty skeleton when a run was killed before its first phase ended."""
    path = run_dir / "phases.json"
    if not path.exists():
        return {"phases": []}
    data = json_object(path, "phases file")
    if not isinstance(data.get("phases"), list):
        raise ReportError(f"{path}: field 'phases' is missing or not a list")
    return data


def starts(records: Iterable[dict]) -> dict:
    """Runner starts counted and timed by kind, by phase and by file: what the reuse work is judged by."""

    def tally(group: list[dict]) -> dict:
        return {
            "starts": len(started(group)),
            "failed": len(group) - len(started(group)),
            "startup_s": round(sum(r.get("startup_s") or 0.0 for r in group), 3),
            "by_kind": dict(Counter(r["kind"] for r in started(group))),
        }

    records = list(records)

    def grouped(key: str) -> dict:
        keys = sorted({r[key] for r in records}, key=str)
        return {k: tally([r for r in records if r[key] == k]) for k in keys}

    return {
        "total": tally(records),
        "by_kind": grouped("kind"),
        "by_phase": grouped("phase"),
        "by_file": grouped("file"),
    }


def files(tests: Iterable[dict]) -> dict:
    """Per test file: outcome counts and wall seconds (setup+call+teardown, so runner starts included)."""
    result: dict[str, dict] = {}
    for test in tests:
        entry = result.setdefault(test["file"], {"tests": 0, "outcomes": {}, "wall_s": 0.0})
        entry["tests"] += 1
        entry["outcomes"][test["outcome"]] = entry["outcomes"].get(test["outcome"], 0) + 1
        seconds = sum(test.get(k) or 0.0 for k in ("setup_s", "call_s", "teardown_s"))
        entry["wall_s"] = round(entry["wall_s"] + seconds, 3)
    return dict(sorted(result.items()))


def devices(platform_name: str | None, records: list[dict], workers: list[dict], env: Mapping) -> list[dict]:
    """The devices the run used (by UUID from the ledger), with name and total from the platform.

    A UUID the platform no longer shows (``harness report`` on another machine) keeps a null name and
    total rather than being dropped.
    """
    used = {u for w in workers for u in w.get("devices") or []} | {
        u for r in records for u in r.get("devices") or []
    }
    known: list[dict] = []
    if platform_name:
        try:
            found = detect({**env, "HARNESS_PLATFORM": platform_name}).platform.devices()
        except HarnessError:
            found = []
        known = [
            {"index": d.index, "name": d.name, "uuid": d.uuid, "total_bytes": d.total_bytes} for d in found
        ]
    if used:
        known = [d for d in known if d["uuid"] in used]
    missing = sorted(used - {d["uuid"] for d in known})
    return known + [{"index": None, "name": None, "uuid": u, "total_bytes": None} for u in missing]
