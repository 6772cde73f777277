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
    advice = [_advice(group, records) for group in groups.values() if len(group) > 1]
    return sorted(advice, key=lambda a: -a["seconds_saved"])


def _advice(group: list[Record], records: list[Record]) -> Advice:
    """One shared fixture for ``group``, at the narrowest scope that holds all its tests, and the later
    starts in that scope it would keep the device from."""
    first = group[0]
    tests = list(dict.fromkeys(r["test"] for r in group))
    classes = {class_of(t) for t in tests}
    owner = classes.pop() if len(classes) == 1 else None
    scope = "class" if owner else "module"
    members = {id(r) for r in group}
    later = [
        r
        for r in records
        if id(r) not in members
        and (r["phase"], r["worker"], r["file"]) == (first["phase"], first["worker"], first["file"])
        and r["start"] > first["start"]
        and (scope == "module" or class_of(r["test"]) == owner)
    ]
    return {
        "kind": first["kind"],
        "model": first["model"],
        "fingerprint": first["fingerprint"],
        "phase": first["phase"],
        "worker": first["worker"],
        "file": first["file"],
        "starts": len(group),
        "runners": [r["id"] for r in group],
        "tests": tests,
        "scope": scope,
        "class": owner,
        "seconds_saved": round(sum(r.get("startup_s") or 0.0 for r in group[1:]), 3),
        "blocked": [{"test": r["test"], "kind": r["kind"], "model": r["model"]} for r in later],
        "warning": _warning(first["kind"], first["model"], scope, later),
    }


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
