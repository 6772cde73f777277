"""``harness compare BEFORE AFTER``: what a change did to runner starts, reuse, wall time and outcomes.

Per suite, per phase and per file, each figure as ``64 → 18 (−46)``; files and phases present on one
side only are marked added or removed. ``--fail-on-regression starts`` / ``wall:10%`` turn it into a CI
gate (exit 1 when AFTER is worse).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError
from harness.report.schema import Report, Tally
from harness.report.store import load

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
        if not match:
            raise HarnessError(f"--fail-on-regression {spec!r}: expected 'starts', 'wall' or 'wall:N%'")
        return cls("wall", float(match[1] or 0.0))

    @property
    def spec(self) -> str:
        """The rule as ``--fail-on-regression`` takes it, in one spelling (generated CI files carry it)."""
        return self.metric if self.metric == "starts" else f"wall:{self.percent:g}%"

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
    result = compare(before, after)
    print(render(result, args.format), end="")
    reasons = [reason for gate in gates if (reason := gate.regression(result))]
    for reason in reasons:
        print(f"harness: regression: {reason}", file=sys.stderr)
    return 1 if reasons else 0


def load_checked(given: str) -> Report:
    """A report as ``load`` reads it, refused unless it is a regular file (a FIFO would block the read)
    and of the shape ``compare`` reads: a wrong shape is bad input (2), not a regression (1)."""
    path = Path(given)
    target = path / "report.json" if path.is_dir() else path
    try:
        mode = os.stat(target).st_mode
    except OSError:
        mode = stat.S_IFREG  # missing or unreadable: load names the problem
    if not stat.S_ISREG(mode):
        raise HarnessError(f"{target}: not a regular file (a report is a report.json or its run directory)")
    report = load(path)
    try:
        figures = [_suite(report), *_phases(report).values(), *_files(report).values()]
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        problem = f"{type(error).__name__}: {error}"
        raise HarnessError(f"{target}: not of a harness report's shape ({problem})") from None
    for metric, value in ((m, v) for figure in figures for m, v in figure.items()):
        if value is not None and not _finite(value):
            raise HarnessError(f"{target}: report figure {metric} is {value!r}, not a number")
    return report


def _finite(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


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
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
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
        "failed": sum(outcomes.count(o) for o in FAILED),
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
    for name in sorted(set(by_file) | set(files)):
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
