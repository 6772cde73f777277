"""What a run records of its selection (phases.json's and report.json's ``selection``), the summary's
lines about it, and the rates across builds (``harness selection REPORT...``).

``selection``: ``mode`` ("on" skips, "shadow" runs everything), ``ref`` and ``base`` (the merge base),
``changed`` (files), ``selected`` (node id -> why), ``skipped`` (node ids), ``everything`` (why every test
ran, or null), ``ignored`` (changed files the rules ignore) and, in the report, ``false_green``: the tests
selection skipped (or would have) that failed or errored, known only in shadow (null when mode is "on").
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from harness.select.choose import Selection

FAILED = ("failed", "error")
REASON = "harness: not selected"  # the skip reason a test selection leaves out gets (JUnit, report.json)


def section(mode: str, ref: str, base: str | None, changed: Iterable[str], selection: Selection) -> dict:
    """phases.json's ``selection``."""
    return {
        "mode": mode,
        "ref": ref,
        "base": base,
        "changed": sorted(changed),
        "selected": dict(selection.selected),
        "skipped": list(selection.skipped),
        "everything": selection.everything,
        "ignored": list(selection.ignored),
    }


def finished(recorded: Mapping[str, Any], tests: Iterable[Mapping[str, Any]]) -> dict:
    """report.json's ``selection``: phases.json's, with ``false_green`` from the outcomes (shadow only)."""
    done = dict(recorded)
    if done.get("mode") != "shadow":
        done["false_green"] = None
        return done
    skipped = set(done.get("skipped") or ())
    done["false_green"] = sorted(
        {t["nodeid"] for t in tests if t.get("outcome") in FAILED and t.get("nodeid") in skipped}
    )
    return done


def lines(selection: Mapping[str, Any] | None) -> list[str]:
    """The summary's lines: what ran, what was (or would be) skipped, why, and the false greens."""
    if not selection:
        return []
    selected, skipped = selection.get("selected") or {}, selection.get("skipped") or []
    shadow = selection.get("mode") == "shadow"
    verb = "would skip" if shadow else "skipped"
    base = str(selection.get("base") or "?")[:12]
    head = (
        f"selection{' (shadow: every test ran)' if shadow else ''} since {selection.get('ref')} "
        f"(merge base {base}), {len(selection.get('changed') or [])} changed files: "
        f"{len(selected)} selected, {len(skipped)} {verb}"
    )
    out = [head]
    if selection.get("everything"):
        out.append(f"every test selected: {selection['everything']}")
    else:
        reasons = Counter(_kind(why) for why in selected.values())
        out += [f"- {count} because {why}" for why, count in reasons.most_common(6)]
    false_green = selection.get("false_green")
    if shadow and false_green is not None:
        shown = ", ".join(false_green[:5]) + (", ..." if len(false_green) > 5 else "")
        told = f": {shown}" if false_green else ""
        out.append(f"false greens (failed, but selection would skip them): {len(false_green)}{told}")
    return out


def _kind(why: str) -> str:
    """A reason without its per-test detail, for counting: 'it ran harness/x.py' stays whole."""
    return why.split(" (")[0] if why.startswith(("its engine group", "its file changed")) else why


def rates(sections: Iterable[tuple[str, Mapping[str, Any] | None]]) -> tuple[list[str], bool]:
    """Across builds (source, report's ``selection``): per build its selected share and false greens, then
    the median share and the false-green rate (builds in shadow with at least one); whether any build
    had a false green."""
    out, shares, shadow, green = [], [], 0, 0
    for source, found in sections:
        if not found:
            out.append(f"{source}: no selection recorded")
            continue
        total = len(found.get("selected") or {}) + len(found.get("skipped") or [])
        share = len(found.get("selected") or {}) / total if total else 1.0
        shares.append(share)
        misses = found.get("false_green")
        if found.get("mode") == "shadow" and misses is not None:
            shadow += 1
            green += bool(misses)
        missed = "unknown (mode on)" if misses is None else str(len(misses))
        out.append(f"{source}: {found.get('mode')}, selected {share:.0%} of {total}, false greens {missed}")
    if shares:
        rate = f"{green}/{shadow} shadow builds ({green / shadow:.0%})" if shadow else "unknown (no shadow)"
        median = statistics.median(shares)
        out.append(f"{len(shares)} builds: median selected {median:.0%}; false-green rate {rate}")
    return out, green > 0


def joined(reports: Iterable[Mapping[str, Any]]) -> dict:
    """``harness merge``'s ``footprints`` and ``selection``: every shard's, not the first's alone (a shard's
    tests without their footprints would all be unknown next build; its false greens would be lost)."""
    from harness.select import table

    reports = list(reports)
    out: dict = {}
    tests: dict[str, set[str]] = {}
    markers: dict[str, set[str]] = {}
    for report in reports:
        decoded = table.decode(report.get("footprints"))
        if isinstance(decoded, str):
            continue
        for test, files in decoded[0].items():
            tests.setdefault(test, set()).update(files)
        for test, names in decoded[1].items():
            markers.setdefault(test, set()).update(names)
    if tests:
        out["footprints"] = table.encode(tests, markers)
    sections = [r["selection"] for r in reports if r.get("selection")]
    if sections:
        first = sections[0]
        everything = next((s["everything"] for s in sections if s.get("everything")), None)
        greens = [s.get("false_green") for s in sections]
        out["selection"] = {
            **first,
            "changed": sorted({f for s in sections for f in s.get("changed") or []}),
            "selected": {k: v for s in sections for k, v in (s.get("selected") or {}).items()},
            "skipped": list(
                dict.fromkeys(n for s in sections for n in s.get("skipped") or [])
            ),  # per shard, each once
            "everything": everything,
            "ignored": sorted({f for s in sections for f in s.get("ignored") or []}),
            "false_green": None if None in greens else sorted({n for g in greens for n in g or []}),
        }
    return out
