"""One suite's report from the reports of its shards (the parallel CI jobs of one build).

The shards must be of one suite, one platform and one commit, all shards of one split, each test in one
shard only: anything else is one line and exit 2, never a wrong sum. A phase's wall is its slowest
shard's (they ran side by side); tests, runner records, findings and reuse events are the shards'
together; starts, files and advice are counted again from them.
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import HarnessError
from harness.report import advisor
from harness.report.build import files, starts
from harness.report.compare import load_checked
from harness.report.outcomes import worst
from harness.report.schema import Report
from harness.split import shard_of

LISTS = ("tests", "records", "findings", "workers", "reuses", "reuse_refusals", "splits")


def merge(reports: list[Report], names: list[str]) -> Report:
    """The shards' reports as one (see the module)."""
    _same(reports, names)
    first = reports[0]
    merged: dict = {**first, "shard": None, "shards": [r.get("shard") for r in reports]}
    for field in LISTS:
        merged[field] = [item for report in reports for item in report.get(field, [])]  # type: ignore[attr-defined]
    merged["samples"] = sorted((s for r in reports for s in r.get("samples", [])), key=lambda s: s["t"])
    merged["devices"] = list({d["uuid"]: d for r in reports for d in r.get("devices", [])}.values())
    merged["phases"] = _phases(reports)
    merged["starts"] = starts(merged["records"], merged["reuses"])
    merged["files"] = files(merged["tests"])
    merged["advice"] = advisor.advise(merged["records"])
    return merged  # type: ignore[return-value]


def _same(reports: list[Report], names: list[str]) -> None:
    for field, read in (
        ("suite", lambda r: r.get("suite")),
        ("platform", lambda r: r["platform"].get("name")),
        ("commit", lambda r: r.get("versions", {}).get("commit")),
    ):
        seen = {read(r) for r in reports}
        if len(seen) > 1:
            raise HarnessError(f"the shards are of different {field}s ({', '.join(sorted(map(str, seen)))})")
    owner: dict[str, int] = {}
    for index, report in enumerate(reports):
        for test in report["tests"]:
            if (first := owner.setdefault(test["nodeid"], index)) != index:
                both = f"{names[first]}, {names[index]}"
                raise HarnessError(f"{test['nodeid'][:200]} ran in two shards: {both}")
    _complete([r.get("shard") for r in reports])


def _complete(shards: list) -> None:
    """Every shard of one split, once: a shard whose job died leaves no report, and a suite merged
    without it would show fewer starts than it made."""
    if all(shard is None for shard in shards):
        return  # unsharded runs (one report per job)
    parsed = [shard_of(shard) for shard in shards]
    if None in parsed:
        raise HarnessError(f"the shards are not all of one split ({', '.join(map(str, shards))[:300]})")
    split = [pair for pair in parsed if pair is not None]
    counts = {count for _, count in split}
    if len(counts) > 1:
        raise HarnessError(f"the shards are of splits into {' and '.join(map(str, sorted(counts)))}")
    count = counts.pop()
    missing = sorted(set(range(count)) - {index for index, _ in split})
    if missing:
        named = ", ".join(f"{index}/{count}" for index in missing[:5])
        raise HarnessError(f"shard {named} of {count} missing: its job left no report to merge")


def _phases(reports: list[Report]) -> list[dict]:
    by_name: dict[str, list[dict]] = {}
    for report in reports:
        for phase in report["phases"]:
            by_name.setdefault(phase["name"], []).append({**phase})
    merged = []
    for name, shards in by_name.items():
        walls = [p["wall_s"] for p in shards if p.get("wall_s") is not None]
        outcomes: dict[str, int] = {}
        for shard in shards:
            for outcome, count in shard.get("outcomes", {}).items():
                outcomes[outcome] = outcomes.get(outcome, 0) + count
        merged.append(
            {
                **shards[0],
                "name": name,
                "wall_s": max(walls) if walls else None,
                "exit_code": worst([p.get("exit_code") or 0 for p in shards]),
                "timed_out": any(p.get("timed_out") for p in shards),
                "outcomes": outcomes,
            }
        )
    return merged


def load_suite(given: str) -> Report:
    """A report, its run directory, or a folder of shard run directories (merged): what a baseline is."""
    path = Path(given)
    if path.is_dir() and not (path / "report.json").exists():
        parts = sorted(str(part.parent) for part in path.glob("*/report.json"))
        if parts:
            return merge([load_checked(part) for part in parts], parts)
    return load_checked(given)
