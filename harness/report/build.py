"""The report dict of a run directory: its phases, tests, runner records, findings and tallies."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast

from harness.errors import HarnessError, ReportError
from harness.ledger.reader import Ledger, started
from harness.ledger.reader import read as read_ledger
from harness.ledger.records import seconds
from harness.platform import detect
from harness.report import advisor, gpu_free, store
from harness.report.environment import environment, versions
from harness.report.schema import (
    VERSION,
    Device,
    FileTally,
    Finding,
    Phase,
    PhasesFile,
    Record,
    Report,
    Rerun,
    Starts,
    Tally,
    TestResult,
    WorkerInfo,
)
from harness.report.store import load_phases, recorded
from harness.select import record as selected
from harness.select import table


def build(run_dir: Path, env: Mapping[str, str]) -> Report:
    """The report dict of a run directory, read from ``phases.json`` and the per-phase ledgers."""
    meta = _phases_file(run_dir)
    names = _phase_names(run_dir, meta)
    ledger, collected = _ledgers(run_dir / "ledger", names)
    phases = _phases(meta, names, ledger.tests, collected)
    report: Report = {
        "version": VERSION,
        "generated": time.time(),
        "suite": meta.get("suite"),
        "shard": meta.get("shard"),
        "started": meta.get("started"),
        "platform": {"name": meta.get("platform"), "reason": meta.get("platform_reason")},
        "devices": devices(meta.get("platform"), ledger.records, ledger.workers, env),
        "versions": versions(Path.cwd()),
        "environment": environment(env),
        "phases": phases,
        "tests": ledger.tests,
        "records": ledger.records,
        "findings": ledger.findings
        + _timeouts(meta)
        + _unaccounted(phases, collected, ledger.tests)
        + _run_twice(ledger.tests)
        + near_timeout(ledger.tests, ledger.workers, _own_timeouts(run_dir)),
        "workers": ledger.workers,
        "samples": sorted(ledger.samples, key=lambda sample: sample["t"]),
        "reuses": ledger.reuses,
        "reuse_refusals": ledger.refusals,
        "reruns": cast("list[Rerun]", ledger.reruns),
        "splits": _splits(
            [split, *ledger.shards] if (split := meta.get("split")) else ledger.shards, ledger.tests
        ),
        "starts": starts(ledger.records, ledger.reuses, ledger.reruns),
        "files": files(ledger.tests),
        "advice": advisor.advise(ledger.records),
        "gpu_free": gpu_free.section(meta.get("platform"), ledger.tests, ledger.records, ledger.workers),
    }
    if meta.get("history") is not None:  # harness run --history: its source and failures, or why none
        report["history"] = meta.get("history")
    sessions = store.footprint_files(sorted((run_dir / "ledger").glob("*")), meta.get("started"))
    if (footprints := table.collect(sessions)) is not None:
        report["footprints"] = footprints
    if meta.get("selection"):  # harness run --changed-since: with the false greens (shadow)
        report["selection"] = selected.finished(meta["selection"], ledger.tests)  # type: ignore[arg-type]
    return report


def _splits(shards: list[dict], tests: list[TestResult]) -> list[dict]:
    """Each phase's ``--num-shards`` split (the first process's word for it: every worker makes the same)
    with the seconds its tests took, against the seconds it predicted."""
    seen: dict[object, dict] = {}
    for shard in shards:  # harness run --shard's (no phase: the whole run) first
        seen.setdefault(shard.get("phase"), shard)
    return [
        {
            **shard,
            "actual_s": round(sum(seconds(t) for t in tests if phase is None or t.get("phase") == phase), 3),
        }
        for phase, shard in seen.items()
    ]


def _phases_file(run_dir: Path) -> PhasesFile:
    """``phases.json``, or an empty skeleton when a run was killed before its first phase ended."""
    path = run_dir / "phases.json"
    if not path.exists():
        return {"phases": []}
    return load_phases(path)


def _phase_names(run_dir: Path, meta: PhasesFile) -> list[str]:
    """The phases of ``phases.json`` in run order, then ledger directories it does not name (a killed run)."""
    names = [phase["name"] for phase in meta["phases"]]
    ledger_root = run_dir / "ledger"
    if ledger_root.is_dir():
        names += sorted(p.name for p in ledger_root.iterdir() if p.is_dir() and p.name not in names)
    if not names and not (run_dir / "phases.json").exists():
        raise ReportError(f"{run_dir} is not a run directory (no phases.json, no ledger/)")
    return names


def _ledgers(ledger_root: Path, names: list[str]) -> tuple[Ledger, dict[str, dict[str, None]]]:
    """Every phase's ledger merged into one, and each phase's collected tests; a plain pytest run has no
    HARNESS_PHASE, so the directory names the phase then. A symlinked phase directory is not read."""
    merged, collected = Ledger(), {}
    for name in names:
        if not (ledger_root / name).is_dir() or (ledger_root / name).is_symlink():
            continue
        ledger = read_ledger(ledger_root / name)
        collected[name] = ledger.collected
        stamped = cast(
            list[dict],
            [
                *ledger.records,
                *ledger.tests,
                *ledger.workers,
                *ledger.findings,
                *ledger.reuses,
                *ledger.shards,
            ],
        )
        for item in stamped:
            if item.get("phase") is None:
                item["phase"] = name
        merged.records += ledger.records
        merged.findings += ledger.findings
        merged.tests += ledger.tests
        merged.workers += ledger.workers
        merged.samples += ledger.samples
        merged.reuses += ledger.reuses
        merged.refusals += ledger.refusals
        merged.reruns += ledger.reruns
        merged.shards += ledger.shards  # a pytest --num-shards split's record: what merge proves
    return merged, collected


def _timeouts(meta: PhasesFile) -> list[Finding]:
    """A finding for each phase ``harness run`` stopped at its timeout."""
    return [
        {
            "type": "timeout",
            "t": (phase.get("started") or 0.0) + (phase.get("wall_s") or 0.0),
            "phase": phase["name"],
            "message": f"phase {phase['name']} ran past its timeout ({phase.get('wall_s') or 0.0:.0f} s) "
            "and was stopped; its remaining tests did not run",
        }
        for phase in meta["phases"]
        if phase.get("timed_out")
    ]


NEARS = 0.8  # a test that took more than this share of its per-test timeout is one slow machine from it


def _own_timeouts(run_dir: Path) -> dict[str, float]:
    """The per-test timeouts ``harness run --timeouts-from-history`` gave (``test-timeouts.json``)."""
    path = run_dir / "test-timeouts.json"
    return recorded(path)[0] if path.is_file() else {}


def near_timeout(
    tests: list[TestResult], workers: list[WorkerInfo], own: Mapping[str, float] | None = None
) -> list[Finding]:
    """A finding for each test whose seconds (setup, call and teardown: what pytest-timeout times) passed
    ``NEARS`` of the per-test timeout it had: its own from the history (``own``), else its process's (the
    ``worker`` event's)."""
    limits: dict[tuple[str | None, str | None], float | None] = {
        (w["worker"], w.get("phase")): w.get("timeout") for w in workers
    }
    found: list[Finding] = []
    for test in tests:
        limit = (own or {}).get(test["nodeid"]) or limits.get((test["worker"], test["phase"]))
        took = seconds(test)
        if limit and took > NEARS * limit and test["outcome"] != "skipped":
            found.append(
                {
                    "type": "near-timeout",
                    "t": test["t"],
                    "test": test["nodeid"],
                    "phase": test.get("phase"),
                    "worker": test.get("worker"),
                    "message": f"{test['nodeid']} took {took:.0f} s, {took / limit:.0%} of its {limit:.0f} s "
                    "timeout: a slower machine would time it out",
                }
            )
    return found


def _run_twice(tests: list[TestResult]) -> list[Finding]:
    """A node id with more than one test event: it ran in two phases (or twice in one), and so did its
    engines; each phase's selection should take it once."""
    seen: dict[str, list[TestResult]] = {}
    for test in tests:
        seen.setdefault(test["nodeid"], []).append(test)
    return [
        {
            "type": "test-run-twice",
            "t": runs[-1]["t"],
            "test": nodeid,
            "message": f"{nodeid} ran {len(runs)} times (phases: {', '.join(str(r['phase']) for r in runs)})",
        }
        for nodeid, runs in seen.items()
        if len(runs) > 1
    ]


def _phases(
    meta: PhasesFile, names: list[str], tests: list[TestResult], collected: dict[str, dict[str, None]]
) -> list[Phase]:
    """Every phase with its test outcomes and its collected and reported test counts; one known only from
    its ledger has no timings."""
    by_phase = {phase["name"]: phase for phase in meta["phases"]}
    phases: list[Phase] = []
    for name in names:
        phase: Phase = {
            **by_phase.get(name, {"name": name, "started": None, "wall_s": None, "exit_code": None})
        }
        phase["outcomes"] = dict(Counter(t["outcome"] for t in tests if t["phase"] == name))
        phase["collected"] = len(collected.get(name, {}))
        phase["reported"] = len({t["nodeid"] for t in tests if t["phase"] == name})
        phases.append(phase)
    return phases


def _unaccounted(
    phases: list[Phase], collected: dict[str, dict[str, None]], tests: list[TestResult]
) -> list[Finding]:
    """A finding per phase naming its collected tests without a result (a phase stopped at its timeout
    or by a signal, a crash nothing resumed after)."""
    findings: list[Finding] = []
    for phase in phases:
        reported = {t["nodeid"] for t in tests if t["phase"] == phase["name"]}
        missing = [test for test in collected.get(phase["name"], {}) if test not in reported]
        if not missing:
            continue
        why = "it timed out" if phase.get("timed_out") else "its pytest ended early"
        why = f"it was stopped ({phase['stopped']})" if phase.get("stopped") else why
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        findings.append(
            {
                "type": "unaccounted",
                "t": (phase.get("started") or 0.0) + (phase.get("wall_s") or 0.0),
                "phase": phase["name"],
                "tests": missing,
                "message": f"phase {phase['name']}: {len(missing)} of {phase['collected']} collected tests "
                f"have no result, as {why}: {shown}",
            }
        )
    return findings


def starts(records: Iterable[Record], reuses: Iterable[dict] = (), reruns: Iterable[dict] = ()) -> Starts:
    """Runner starts counted and timed by kind, by phase and by file: what the reuse work is judged by.

    ``reused`` counts starts the reuse pool avoided (a warm engine handed on) and ``saved_s`` the seconds
    those engines' own starts took, both net of the reuse safety net's retries (``reruns`` of policy
    ``reuse``): such a retry's starts are spent, and what it was handed avoided no start a run without
    reuse makes (it has no such retry); a retry by failure class or pytest-rerunfailures runs without reuse
    too. ``retries`` and ``retry_starts`` count every retry (not by kind: a retry is a test's).
    """
    records, reuses, reruns = list(records), list(reuses), list(reruns)

    def grouped(key: str) -> dict[str, Tally]:
        keys: list[Any] = sorted({r.get(key) for r in [*records, *reuses]}, key=str)  # None: not known
        return {
            k: _tally(
                [r for r in records if r.get(key) == k],
                [r for r in reuses if r.get(key) == k],
                [r for r in reruns if r.get(key) == k] if key != "kind" else [],
            )
            for k in keys
        }

    return {
        "total": _tally(records, reuses, reruns),
        "by_kind": grouped("kind"),
        "by_phase": grouped("phase"),
        "by_file": grouped("file"),
    }


def replays(reruns: Iterable[dict]) -> list[dict]:
    """The reuse safety net's retries (policy ``reuse``): the only ones run for reuse's sake."""
    return [r for r in reruns if r.get("policy") == "reuse"]


def _tally(group: list[Record], reused: list[dict], reruns: list[dict] = ()) -> Tally:  # type: ignore[assignment]
    own = replays(reruns)
    spent = sum(r.get("starts", 0) + r.get("reused", 0) for r in own)
    spent_s = sum(r.get("started_s", 0.0) + r.get("reused_s", 0.0) for r in own)
    tally: Tally = {
        "starts": len(started(group)),
        "failed": len(group) - len(started(group)),
        "startup_s": round(sum(r.get("startup_s") or 0.0 for r in group), 3),
        "by_kind": dict(Counter(r["kind"] for r in started(group))),
        "reused": len(reused) - spent,
        "saved_s": round(sum(r.get("saved_s") or 0.0 for r in reused) - spent_s, 3),
    }
    if reruns:
        tally["retries"] = len(reruns)
        tally["retry_starts"] = sum(r.get("starts", 0) for r in reruns)
    return tally


def files(tests: Iterable[TestResult]) -> dict[str, FileTally]:
    """Per test file: outcome counts and wall seconds (setup+call+teardown, so runner starts included)."""
    result: dict[str, FileTally] = {}
    for test in tests:
        entry = result.setdefault(test["file"], {"tests": 0, "outcomes": {}, "wall_s": 0.0})
        entry["tests"] += 1
        entry["outcomes"][test["outcome"]] = entry["outcomes"].get(test["outcome"], 0) + 1
        entry["wall_s"] = round(entry["wall_s"] + seconds(test), 3)
    return dict(sorted(result.items()))


def devices(
    platform_name: str | None, records: list[Record], workers: list[WorkerInfo], env: Mapping[str, str]
) -> list[Device]:
    """The devices the run used (by UUID from the ledger), with name and total from the platform.

    A UUID the platform no longer shows (``harness report`` on another machine) keeps a null name and
    total rather than being dropped.
    """
    used = {u for w in workers for u in w.get("devices") or []} | {
        u for r in records for u in r.get("devices") or []
    }
    known: list[Device] = []
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
