"""One suite's report from the reports of its shards (the parallel CI jobs of one build), and the proof
that they ran the suite's selection: every test once.

The shards must be of one suite, one platform and one commit, each shard of one split once, every shard
present: anything else is one line and exit 2, never a wrong sum. Each shard records the split it applied
(``harness.split.Plan.record``: the selection's size and digest, the split's digest and inputs, the tests
it was assigned); ``account`` checks that the shards agree on all of it, that their assigned tests make the
selection exactly, and names the tests that ran in no shard or in two (a failed proof: ``harness merge``
exits 1). A phase's wall is its slowest shard's (they ran side by side); tests, runner records, findings,
reuse events and retries (``reruns``: each shard's, so pass@1 and a test passing only on a retry in any
shard survive) are the shards' together; starts, files and advice are counted again from them;
``merged_from`` names each report it was made of (a merged one's own parts), so a build is one build
whether given merged, as its shards, or both.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from harness.errors import HarnessError
from harness.report import advisor, gpu_free
from harness.report.build import files, starts
from harness.report.compare import load_checked
from harness.report.outcomes import worst
from harness.report.schema import MergedFrom, Report
from harness.select.record import joined
from harness.split import Shard, digest

# every per-test and per-event list a shard holds: a list left out would keep only the first shard's
LISTS = ("tests", "records", "findings", "workers", "reuses", "reuse_refusals", "reruns", "splits")
NAMED = 5  # tests named in a line; the report's ``accounting`` lists them all


def merge(reports: list[Report], names: list[str]) -> Report:
    """The shards' reports as one, with its ``accounting`` (see the module)."""
    _same(reports, names)
    accounting = account(reports, names)
    first = reports[0]
    parts = [part for report, name in zip(reports, names, strict=True) for part in merged_from(report, name)]
    merged: dict = {**first, "shard": None, "merged_from": parts}
    for field in LISTS:
        merged[field] = [item for report in reports for item in report.get(field, [])]  # type: ignore[attr-defined]
    merged["samples"] = sorted((s for r in reports for s in r.get("samples", [])), key=lambda s: s["t"])
    merged["devices"] = list({d["uuid"]: d for r in reports for d in r.get("devices", [])}.values())
    merged["phases"] = _phases(reports)
    merged["starts"] = starts(merged["records"], merged["reuses"], merged["reruns"])
    merged["files"] = files(merged["tests"])
    merged["advice"] = advisor.advise(merged["records"])
    merged["gpu_free"] = gpu_free.joined(  # each shard's own: its workers' names are every shard's too
        [
            gpu_free.section(
                (r.get("platform") or {}).get("name"),
                r.get("tests", []),
                r.get("records", []),
                r.get("workers", []),
            )
            for r in reports
        ]
    )
    merged.update(joined(reports))  # every shard's footprints and selection (harness.select)
    if accounting is not None:
        merged["accounting"] = accounting
    return merged  # type: ignore[return-value]


def _same(reports: list[Report], names: list[str]) -> None:
    for field, read in (
        ("suite", lambda r: r.get("suite")),
        ("platform", lambda r: r["platform"].get("name")),
        ("commit", lambda r: (r.get("versions") or {}).get("git_commit")),  # environment.versions's field
    ):
        seen = {read(r) for r in reports}
        if len(seen) > 1:
            raise HarnessError(f"the shards are of different {field}s ({', '.join(sorted(map(str, seen)))})")
    found = [shard_of(report, name) for report, name in zip(reports, names, strict=True)]
    if all(shard is None for shard in found):
        _disjoint(reports, names)  # unsharded runs (one report per job)
        return
    shards = [
        Shard.parse(None, f"{name}: shard") if shard is None else shard
        for shard, name in zip(found, names, strict=True)
    ]
    counts = {shard.count for shard in shards}
    if len(counts) > 1:
        raise HarnessError(f"the shards are of splits into {' and '.join(map(str, sorted(counts)))}")
    given: dict[Shard, str] = {}
    for shard, name in zip(shards, names, strict=True):
        if shard in given:
            raise HarnessError(f"shard {shard} given twice: {given[shard]}, {name}")
        given[shard] = name
    count = counts.pop()
    missing = sorted(set(range(count)) - {shard.index for shard in shards})
    if missing:
        named = ", ".join(str(Shard(index, count)) for index in missing[:NAMED])
        raise HarnessError(f"shard {named} of {count} missing: its job left no report to merge")


def _disjoint(reports: list[Report], names: list[str]) -> None:
    owner: dict[str, int] = {}
    for index, report in enumerate(reports):
        for test in report["tests"]:
            if (first := owner.setdefault(test["nodeid"], index)) != index:
                raise HarnessError(
                    f"{test['nodeid'][:200]} ran in two reports: {names[first]}, {names[index]}"
                )


def shard_of(report: Report, source: str = "report") -> Shard | None:
    """A report's shard: ``harness run``'s (its ``shard``, as ``Shard`` writes it), else that of the one
    split a pytest session made under ``--num-shards`` (a report built from its ledger); None for an
    unsharded run. One that is no shard is one ``HarnessError`` line naming ``source``."""
    if report.get("shard") is not None:
        return Shard.parse(report["shard"], f"{source}: shard")
    found = [s for s in report.get("splits", []) if isinstance(s, dict) and "selection" in s]
    return Shard.of_record(found[0], f"{source}: shard") if len(found) == 1 else None


def merged_from(report: Report, name: str = "report") -> list[MergedFrom]:
    """The reports ``report`` is made of, each its build's part (``harness flaky`` counts a build once by
    them): a merged report's own list, else the report itself."""
    if "merged_from" in report:
        return report["merged_from"]
    shard = shard_of(report, name)
    return [
        {
            "shard": None if shard is None else str(shard),
            "started": report.get("started"),
            "generated": report.get("generated"),
        }
    ]


def recorded_split(report: Report, name: str) -> dict | None:
    """The split a shard's report says it applied (its one ``splits`` entry with a selection), or None
    for a report made before shards recorded theirs."""
    found = [s for s in report.get("splits", []) if isinstance(s, dict) and "selection" in s]
    if len(found) > 1:
        raise HarnessError(f"{name}: {len(found)} splits recorded in one shard; a run makes one")
    if found and not _shaped(found[0]):
        raise HarnessError(f"{name}: its recorded split is not one a shard writes: {str(found[0])[:200]}")
    return found[0] if found else None


def _shaped(record: dict) -> bool:
    """Whether a recorded split has the fields ``account`` reads, of their types."""
    selection, assigned = record.get("selection"), record.get("assigned")
    return (
        all(type(record.get(key)) is int for key in ("index", "count"))
        and isinstance(record.get("split"), str)
        and isinstance(selection, dict)
        and type(selection.get("tests")) is int
        and isinstance(selection.get("digest"), str)
        and isinstance(assigned, list)
        and all(isinstance(nodeid, str) for nodeid in assigned)
    )


def account(reports: list[Report], names: list[str]) -> dict | None:
    """The proof that the shards ran their selection, each test once (None for unsharded reports):
    ``{"tests", "accounted", "shards", "proven", "missing", "twice", "stray", "selection", "split"}``;
    ``proven`` is null where the reports recorded no split (made before they did). Shards that disagree
    on the split, or whose assigned tests are not their selection, are one ``HarnessError`` line."""
    shards = [shard_of(report, name) for report, name in zip(reports, names, strict=True)]
    if all(shard is None for shard in shards):
        return None
    records = [recorded_split(report, name) for report, name in zip(reports, names, strict=True)]
    if all(record is None for record in records):
        tests = len({t["nodeid"] for r in reports for t in r["tests"]})
        return {"tests": tests, "accounted": None, "shards": len(reports), "proven": None}
    splits = [record for record in records if record is not None]
    if len(splits) < len(records):
        name = names[records.index(None)]
        raise HarnessError(f"{name}: records no split, unlike the other shards: not of one build")
    facts = {(str(r["count"]), str(r["selection"]), str(r["split"]), str(r.get("inputs"))) for r in splits}
    if len(facts) > 1:
        raise HarnessError("the shards recorded two splits (selection, durations or assignment differ)")
    assigned: Counter[str] = Counter()
    for record, shard, name in zip(splits, shards, names, strict=True):
        if (recorded := Shard.of_record(record, f"{name}: its recorded split")) != shard:
            raise HarnessError(f"{name}: shard {shard} recorded the split of {recorded}")
        assigned.update(set(record["assigned"]))
    selection = splits[0]["selection"]
    if (
        max(assigned.values(), default=1) > 1
        or len(assigned) != selection["tests"]
        or digest(assigned) != selection["digest"]
    ):
        raise HarnessError("the shards' assigned tests are not their selection: one split cannot give these")
    ran = Counter(test["nodeid"] for report in reports for test in report["tests"])  # each result counts
    missing = sorted(set(assigned) - set(ran))
    twice = sorted(n for n, times in ran.items() if times > 1)
    stray = sorted(set(ran) - set(assigned))
    return {
        "tests": len(assigned),
        "accounted": sum(1 for n in assigned if ran[n] == 1),
        "shards": len(reports),
        "proven": not (missing or twice or stray),
        "missing": missing,
        "twice": twice,
        "stray": stray,
        "selection": selection["digest"],
        "split": splits[0]["split"],
    }


def account_shard(report: Report) -> dict | None:
    """One shard's own accounting (``harness run --shard``): the tests its split assigned it that have a
    result, those that have none, and any that ran unassigned. None where it recorded no split."""
    record = recorded_split(report, "this run")
    if record is None:
        return None
    assigned = set(record["assigned"])
    ran = Counter(test["nodeid"] for test in report["tests"])
    missing, stray = sorted(assigned - set(ran)), sorted(set(ran) - assigned)
    twice = sorted(nodeid for nodeid, times in ran.items() if times > 1)
    return {
        "tests": len(assigned),
        "accounted": sum(1 for nodeid in assigned if ran[nodeid] == 1),
        "shards": 1,
        "proven": not (missing or stray or twice),
        "missing": missing,
        "twice": twice,
        "stray": stray,
        "selection": record["selection"]["digest"],
        "split": record["split"],
    }


def line(accounting: dict, where: str) -> str:
    """The accounting in one line: ``accounted: 40 of 40 tests in 4 shards``, or what failed the proof."""
    if accounting["proven"] is None:
        tests = accounting["tests"]
        return f"accounted: not recorded ({tests} tests in {where}; made before shards recorded their split)"
    said = f"{accounting['accounted']} of {accounting['tests']} tests in {where}"
    if accounting["proven"]:
        return f"accounted: {said}"
    parts = [
        f"{what} {len(found)}: {', '.join(found[:NAMED])}{', ...' if len(found) > NAMED else ''}"
        for key, what in (("missing", "ran nowhere"), ("twice", "ran twice"), ("stray", "ran unassigned"))
        if (found := accounting[key])
    ]
    return f"not accounted: {said}; {'; '.join(parts)}"


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
