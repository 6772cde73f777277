"""``harness compare BEFORE AFTER``: what a change did to runner starts, reuse, wall time and outcomes.

Per suite, per phase and per file, each figure as ``64 → 18 (−46)``; files and phases present on one
side only are marked added or removed. ``--fail-on-regression starts`` / ``wall:10%`` turn it into a CI
gate (exit 1 when AFTER is worse).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass
from decimal import Decimal

from harness.errors import HarnessError
from harness.report.schema import Report, Tally
from harness.report.store import load
from harness.report.summary import text

METRICS = {
    "vllm_starts": "vLLM starts",
    "hf_starts": "HF starts",
    "reused": "reused",
    "saved_s": "saved",
    "wall_s": "wall",
    "passed": "passed",
    "failed": "failed",
}
SECONDS = ("saved_s", "wall_s")
MOST_PERCENT = 1e9  # a wall gate past this is a typo (and 1e400 no float holds)
FAILED = ("failed", "error")
MINUS = "\u2212"


@dataclass(frozen=True)
class Gate:
    """One ``--fail-on-regression`` rule: ``starts`` (any more starts) or ``wall:P%`` (slower by > P %)."""

    metric: str
    percent: float = 0.0

    @classmethod
    def parse(cls, spec: str) -> Gate:
        if spec.strip() == "starts":
            return cls("starts")
        match = re.fullmatch(r"\s*wall(?::\s*([0-9]+(?:\.[0-9]+)?)\s*%)?\s*", spec, re.ASCII)
        if not match or not float(match[1] or 0.0) <= MOST_PERCENT:
            raise HarnessError(
                f"--fail-on-regression {spec[:80]!r}: expected 'starts', 'wall' or 'wall:N%' "
                f"(N from 0 to {MOST_PERCENT:.0f})"
            )
        return cls("wall", float(match[1] or 0.0))

    @property
    def spec(self) -> str:
        """The rule as ``--fail-on-regression`` takes it, in one spelling that ``parse`` reads back to the
        same gate (generated CI files carry it): never an exponent (``1e+06``)."""
        if self.metric == "starts":
            return "starts"
        digits = format(Decimal(repr(self.percent)), "f")
        return f"wall:{digits.rstrip('0').rstrip('.') if '.' in digits else digits}%"

    def regression(self, result: dict) -> str | None:
        """A one-line reason when AFTER is worse than BEFORE by this rule, else None; a rise in starts
        names each file whose starts grew."""
        suite = result["suite"]["metrics"]
        if self.metric == "starts":
            before = suite["vllm_starts"][0] + suite["hf_starts"][0]
            after = suite["vllm_starts"][1] + suite["hf_starts"][1]
            files = grown(result)
            # a file that was there before and starts more now; a new file's starts are the new tests'
            rose = any(f["status"] == "both" and _more(f) for f in result["files"])
            if after <= before and not rose:
                return None
            return f"runner starts rose: {change(before, after)}" + "".join(f"; {file}" for file in files)
        before, after = suite["wall_s"]
        if before is None or after is None or not math.isfinite(before + after):
            raise HarnessError("--fail-on-regression wall: a report has no (finite) phase wall times")
        if after > before * (1 + self.percent / 100):
            return f"wall time rose more than {self.percent:g}%: {change(before, after, seconds=True)}"
        return None


def main(args: argparse.Namespace) -> int:
    gates = [Gate.parse(spec) for spec in args.fail_on_regression]
    before, after = load_checked(args.before), load_checked(args.after)
    if gates and itself(before, after):
        raise HarnessError(f"{args.before} and {args.after} are one build's report: a gate needs two builds")
    result = compare(before, after)
    print(render(result, args.format), end="")
    reasons = [reason for gate in gates if (reason := gate.regression(result))]
    for reason in reasons:
        print(f"harness: regression: {reason}", file=sys.stderr)
    return 1 if reasons else 0


def itself(before: Report, after: Report) -> bool:
    """Whether ``before`` is ``after``'s own build: one commit, one run (the same start) and the same report
    (written at the same time: a merge keeps its first shard's), which two runs never share."""
    then, now = before.get("versions", {}), after.get("versions", {})
    return (
        before.get("started") is not None
        and (before.get("started"), before.get("generated")) == (after.get("started"), after.get("generated"))
        and then.get("git_commit") == now.get("git_commit")
    )


def load_checked(given: str) -> Report:
    """A report through the one loader (``store.load``): a FIFO, a wrong shape, a negative count or a
    figure that is not a number is bad input (2), never a regression (1) nor a crash."""
    return load(given)


def compare(before: Report, after: Report) -> dict:
    """Suite, phase and file figures of both reports as ``[before, after]`` pairs."""
    suite_name = before.get("suite") if before.get("suite") == after.get("suite") else None
    return {
        "suite": {
            "name": suite_name or f"{before.get('suite')} → {after.get('suite')}",
            "status": "both",
            "metrics": _pair(_suite(before), _suite(after)),
        },
        "phases": _rows(_phases(before), _phases(after)),
        "files": _rows(_files(before), _files(after)),
    }


def render(result: dict, fmt: str) -> str:
    """The comparison as aligned text, a Markdown table, or JSON."""
    if fmt == "json":
        return json.dumps(result, indent=1, ensure_ascii=False) + "\n"
    header = ["", *METRICS.values()]
    rows = []
    for scope, items in (
        ("suite", [result["suite"]]),
        ("phase", result["phases"]),
        ("file", result["files"]),
    ):
        for item in items:
            name = f"{scope} {item['name']}" + ("" if item["status"] == "both" else f" ({item['status']})")
            rows.append(
                [name, *(change(*item["metrics"][m], seconds=m in SECONDS) for m in METRICS)],
            )
    if fmt == "md":
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(text(cell) for cell in row) + " |" for row in rows]
        return "\n".join(lines) + "\n"
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
        for row in [header, *rows]
    )


def _more(file: dict) -> bool:
    return any(
        (file["metrics"][m][1] or 0) > (file["metrics"][m][0] or 0) for m in ("vllm_starts", "hf_starts")
    )


def grown(result: dict) -> list[str]:
    """Each file whose starts grew: ``tests/…/test_colbert.py: vLLM starts 1 → 6`` (``— → 3`` when new)."""
    found = []
    for file in result["files"]:
        for metric, label in (("vllm_starts", "vLLM starts"), ("hf_starts", "HF starts")):
            before, after = file["metrics"][metric]
            if (after or 0) > (before or 0):
                found.append(f"{file['name']}: {label} {'—' if before is None else before} → {after}")
    return found


def change(before, after, *, seconds: bool = False) -> str:
    """``64 → 18 (−46)``; a side that is missing shows as ``—``."""
    known = [abs(v) for v in (before, after) if v is not None]
    if not known:
        return "—"
    show = (lambda v: f"{v:.0f}s" if max(known) >= 100 else f"{v:.1f}s") if seconds else str
    if before is None or after is None:
        return f"{'—' if before is None else show(before)} → {'—' if after is None else show(after)}"
    delta = after - before
    sign = "+" if delta > 0 else MINUS if delta < 0 else "±"
    text = f"{show(before)} → {show(after)} ({sign}{show(abs(delta))}"
    if seconds and before:
        text += f", {sign}{abs(delta) / before:.0%}"
    return text + ")"


def _suite(report: Report) -> dict:
    walls = [wall for p in report["phases"] if (wall := p.get("wall_s")) is not None]
    outcomes = [t.get("outcome") for t in report["tests"]]
    return {
        **_kinds(report["starts"].get("total")),
        "wall_s": round(sum(walls), 3) if walls and len(walls) == len(report["phases"]) else None,
        "passed": outcomes.count("passed"),
        "failed": len([o for o in outcomes if o in FAILED]),
    }


def _phases(report: Report) -> dict[str, dict]:
    by_phase = report["starts"].get("by_phase", {})
    return {
        phase["name"]: {
            **_kinds(by_phase.get(phase["name"])),
            "wall_s": phase.get("wall_s"),
            **_outcomes(phase.get("outcomes", {})),
        }
        for phase in report["phases"]
    }


def _files(report: Report) -> dict[str, dict]:
    by_file, files = report["starts"].get("by_file", {}), report["files"]
    figures = {}
    for name in sorted(set(by_file) | set(files), key=str):  # a report built in memory keys None: no file
        file = files.get(name)
        figures[name] = {
            **_kinds(by_file.get(name)),
            "wall_s": file["wall_s"] if file else None,
            **_outcomes(file["outcomes"] if file else {}),
        }
    return figures


def _kinds(tally: Tally | None) -> dict:
    """Starts by kind, and the starts reuse avoided with their seconds (0 in reports made before reuse)."""
    kinds = tally.get("by_kind", {}) if tally else {}
    return {
        "vllm_starts": kinds.get("vllm", 0),
        "hf_starts": kinds.get("hf", 0),
        "reused": tally.get("reused", 0) if tally else 0,
        "saved_s": tally.get("saved_s", 0.0) if tally else 0.0,
    }


def _outcomes(outcomes: dict) -> dict:
    return {"passed": outcomes.get("passed", 0), "failed": sum(outcomes.get(o, 0) for o in FAILED)}


def _pair(before: dict | None, after: dict | None) -> dict:
    return {m: [(before or {}).get(m), (after or {}).get(m)] for m in METRICS}


def _rows(before: dict[str, dict], after: dict[str, dict]) -> list[dict]:
    names = list(before) + [n for n in after if n not in before]
    status = {True: {True: "both", False: "removed"}, False: {True: "added", False: "both"}}
    return [
        {"name": n, "status": status[n in before][n in after], "metrics": _pair(before.get(n), after.get(n))}
        for n in names
    ]
