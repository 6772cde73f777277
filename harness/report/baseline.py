"""Before → after against a baseline (the base branch's report): the lines a summary opens with, the way
vLLM PR #52570 wrote its table: the suite's starts, reuse, wall and outcomes, then each file whose starts
changed, largest change first. A baseline that cannot be read, or is of another suite or platform, is one
line in the summary, never a failure and never a wrong comparison. Nor is a build compared with itself:
an ``--out`` at, inside or holding the baseline is refused before anything is written (``refuse_itself``),
and a baseline of this build's own commit and run (``itself``) is one line, or exit 2 under a gate.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import HarnessError
from harness.report.compare import METRICS, SECONDS, change, compare, itself
from harness.report.schema import Report
from harness.report.summary import code, text
from harness.report.union import load_suite

STARTS = ("vllm_starts", "hf_starts")


def refuse_itself(out: str | os.PathLike[str], path: str | None) -> None:
    """One ``HarnessError`` line when ``out`` (where this build writes its report) is the baseline, inside
    it (a folder of shard run directories would take this build's report as a shard of its own baseline) or
    holds it (the run would clear or overwrite it): every gate would then pass."""
    if not path:
        return
    mine, theirs = Path(out).resolve(), Path(path).resolve()
    if theirs.name == "report.json" and not theirs.is_dir():
        theirs = theirs.parent
    if mine == theirs or theirs in mine.parents or mine in theirs.parents:
        raise HarnessError(
            f"--out {out} and the baseline {path} overlap: this build would be compared with itself "
            "(give the baseline its own directory)"
        )


def against(report: Report, path: str | None, gated: bool = False) -> tuple[dict | None, str | None]:
    """``compare(baseline, report)``, or why there is none (None, None: no baseline asked for); a baseline
    that is this build itself is a ``HarnessError`` when ``gated`` (a gate would pass whatever it did)."""
    if not path:
        return None, None
    if not os.path.lexists(path):  # CI restored nothing: the base branch kept none yet, or no store answered
        return None, f"no baseline at {path} yet: the base branch's build keeps one; nothing compared"
    try:
        before = load_suite(path)
    except HarnessError as error:
        return None, f"the baseline {path} cannot be compared: {str(error).splitlines()[0]}"
    for field, then, now in (
        ("suite", before.get("suite"), report.get("suite")),
        ("platform", before["platform"].get("name"), report["platform"].get("name")),
    ):
        if then != now:
            return None, f"the baseline {path} is of {field} {then!r}, this run of {now!r}: not compared"
    if itself(before, report):
        commit = str(before.get("versions", {}).get("git_commit"))[:12]
        said = f"the baseline {path} is this build's own report (commit {commit}, one run): not compared"
        if gated:
            raise HarnessError(f"{said}; a gate needs the base branch's")
        return None, said
    return compare(before, report), None


def lines(report: Report, path: str | None) -> list[str]:
    """The summary's opening section: before → after, or the one line why not; nothing without a path."""
    result, problem = against(report, path)
    if problem is not None:
        return ["## Before → after", "", text(problem), ""]
    if result is None:
        return []
    suite = result["suite"]["metrics"]
    row = " | ".join(change(*suite[m], seconds=m in SECONDS) for m in METRICS)
    out = ["## Before → after", "", f"Against {text(path)}.", ""]
    out += [
        f"| | {' | '.join(METRICS.values())} |",
        "|---" * (len(METRICS) + 1) + "|",
        f"| suite | {row} |",
        "",
    ]
    changed = [f for f in result["files"] if any(f["metrics"][m][0] != f["metrics"][m][1] for m in STARTS)]
    changed.sort(key=lambda f: (-_moved(f), str(f["name"])))
    if changed:
        out += ["| file | vLLM starts | HF starts |", "|---|---|---|"]
        for file in changed:
            name = code(file["name"])
            status = "" if file["status"] == "both" else f" ({file['status']})"
            cells = " | ".join(change(*file["metrics"][m]) for m in STARTS)
            out.append(f"| `{name}`{status} | {cells} |")
        out.append("")
    return out


def _moved(file: dict) -> int:
    return sum(abs((file["metrics"][m][1] or 0) - (file["metrics"][m][0] or 0)) for m in STARTS)
