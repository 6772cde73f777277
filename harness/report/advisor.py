"""The reuse advisor: runner starts that one shared fixture could have served.

Starts of the same (kind, model, configuration fingerprint) in one file, on one worker, in one phase
happened in one process one after another, so a class- or module-scoped fixture would have paid for one
start instead of all of them. Widening a fixture's scope has a cost the advisor also names: the shared
engine stays alive until its scope ends, so any other runner the module starts later would find the
device memory held (the vLLM #52570 trap: a module-scoped engine alive while a later test builds its own).
"""

from __future__ import annotations

from collections.abc import Iterable

from harness.report.schema import Advice, Record


def advise(records: Iterable[Record]) -> list[Advice]:
    """One advice per group of mergeable starts, the biggest saving first."""
    records = sorted(records, key=lambda r: r["start"])
    groups: dict[tuple, list[Record]] = {}
    for record in records:
        key = (record["phase"], record["worker"], record["file"], record["kind"], record["model"])
        groups.setdefault((*key, record["fingerprint"]), []).append(record)

    advice: list[Advice] = []
    for (phase, worker, file, kind, model, fingerprint), group in groups.items():
        if len(group) < 2:
            continue
        tests = list(dict.fromkeys(r["test"] for r in group))
        classes = {class_of(t) for t in tests}
        owner = classes.pop() if len(classes) == 1 else None
        scope = "class" if owner else "module"
        first = group[0]
        members = {id(r) for r in group}
        later = [
            r
            for r in records
            if id(r) not in members
            and (r["phase"], r["worker"], r["file"]) == (phase, worker, file)
            and r["start"] > first["start"]
            and (scope == "module" or class_of(r["test"]) == owner)
        ]
        advice.append(
            {
                "kind": kind,
                "model": model,
                "fingerprint": fingerprint,
                "phase": phase,
                "worker": worker,
                "file": file,
                "starts": len(group),
                "runners": [r["id"] for r in group],
                "tests": tests,
                "scope": scope,
                "class": owner,
                "seconds_saved": round(sum(r.get("startup_s") or 0.0 for r in group[1:]), 3),
                "blocked": [{"test": r["test"], "kind": r["kind"], "model": r["model"]} for r in later],
                "warning": _warning(kind, model, scope, later),
            }
        )
    return sorted(advice, key=lambda a: -a["seconds_saved"])


def class_of(nodeid: str | None) -> str | None:
    """``file::Class`` of a test node id, or None for a module-level test."""
    if not nodeid:
        return None
    parts = nodeid.split("[", 1)[0].split("::")
    return "::".join(parts[:-1]) if len(parts) > 2 else None


def _warning(kind: str, model: str, scope: str, later: list[Record]) -> str | None:
    if not later:
        return None
    names = ", ".join(dict.fromkeys(f"{r['test']} ({r['kind']} {r['model']})" for r in later))
    return (
        f"a {scope}-scoped {kind} runner of {model} would still hold the device when {names} "
        f"starts its own runner (the vLLM #52570 trap): stop the shared runner first, or move those "
        f"tests to another {scope}"
    )
