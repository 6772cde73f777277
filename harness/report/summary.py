"""``summary.md``: the short Markdown a CI user reads first, and where CI shows it.

Kept under 1 MiB (Buildkite's annotation limit; GitHub's step summary limit): long tables are cut with
a note pointing at ``report.json``, which always has everything.
"""

from __future__ import annotations

import html
import statistics

from harness.failures import CLASSES
from harness.ledger.reader import refused_because
from harness.platform.base import GIB
from harness.report.schema import Advice, Finding, Record, Report, Tally

LIMIT = 1024 * 1024
ROWS = 40  # rows per table before it is cut with a note
SLOWEST = 10
GPU_FREE_NAMED = 5
FAILED_NAMED = 5  # tests named per failure class  # GPU-free tests named in the summary's line


def render(report: Report, rows: int = ROWS, limit: int = LIMIT, opening: list[str] | None = None) -> str:
    """The Markdown summary of a report; ``opening`` (before → after a baseline) right under its title."""
    heading = _heading(report)
    lines = [
        *heading[:2],
        *(opening or []),
        *heading[2:],
        *_phases(report, rows),
        *_failures(report, rows),
        *_starts(report, rows),
        *_gpu_free(report),
        *_slowest(report["records"], rows),
        *_findings(report["findings"], rows),
        *_advice(report.get("advice", []), rows),
    ]
    return _cap("\n".join(lines) + "\n", limit)


def _heading(report: Report) -> list[str]:
    """Title (suite, platform, shard), why this platform, and the devices used."""
    platform = report["platform"]
    suite, where = text(report.get("suite") or "run"), text(platform.get("name") or "unknown platform")
    title = f"# harness: {suite} on {where}"
    if report.get("shard"):
        title += f" (shard {text(report['shard'])})"
    lines = [title, ""]
    if platform.get("reason"):
        lines += [f"Platform: {text(platform['reason'])}", ""]
    for device in report["devices"]:
        total = device.get("total_bytes")
        size = f", {total / GIB:.1f} GiB" if total else ""
        lines.append(f"- device `{code(device['uuid'])}`: {text(device.get('name') or 'unknown')}{size}")
    return [*lines, ""]


def _phases(report: Report, rows: int) -> list[str]:
    body = []
    for phase in report["phases"]:
        outcomes = phase.get("outcomes", {})
        tally = report["starts"]["by_phase"].get(phase["name"])
        kinds = tally["by_kind"] if tally else {}
        body.append(
            [
                text(phase["name"]),
                _cell(phase.get("exit_code")) + (" (timed out)" if phase.get("timed_out") else ""),
                _seconds(phase.get("wall_s")),
                *(str(outcomes.get(k, 0)) for k in ("passed", "failed", "skipped", "error")),
                str(kinds.get("vllm", 0)),
                str(kinds.get("hf", 0)),
            ]
        )
    header = ["phase", "exit", "wall", "passed", "failed", "skipped", "error", "vLLM starts", "HF starts"]
    return ["## Phases", "", *_table(header, body, rows)]


def _failures(report: Report, rows: int) -> list[str]:
    """Why tests failed: each failure class with its count and its tests; a quarantined test's failure
    (recorded as pytest's xfail: skipped, with its class) apart, since it does not gate."""
    gating: dict[str, list[str]] = {}
    quarantined: list[str] = []
    for test in report["tests"]:
        name = test.get("failure_class")
        if name and test["outcome"] == "skipped":
            quarantined.append(test["nodeid"])
        elif name:
            gating.setdefault(name, []).append(test["nodeid"])
    body = [[f"`{name}`", str(len(gating[name])), _named(gating[name])] for name in CLASSES if name in gating]
    retried = {rerun["test"] for rerun in report.get("reruns", [])}
    if retried:
        return [*_pass_at_1(report, retried), *_failures_of(body, quarantined, rows)]
    return _failures_of(body, quarantined, rows)


def _pass_at_1(report: Report, retried: set[str]) -> list[str]:
    """First tries only beside the final outcome: a test that passed on a retry failed its first try."""
    ran = [test for test in report["tests"] if test["outcome"] != "skipped"]
    passed = [test for test in ran if test["outcome"] == "passed"]
    rescued = sum(test["nodeid"] in retried for test in passed)
    return [
        f"pass@1: {len(passed) - rescued} of {len(ran)} tests passed on their first try; finally "
        f"{len(passed)} passed ({rescued} only on a retry)",
        "",
    ]


def _failures_of(body: list[list[str]], quarantined: list[str], rows: int) -> list[str]:
    lines = ["## Why tests failed", "", *_table(["class", "tests", "which"], body, rows), ""] if body else []
    if quarantined:
        lines += [
            f"{len(quarantined)} quarantined tests failed without failing the run: {_named(quarantined)}",
            "",
        ]
    return lines


def _named(nodeids: list[str]) -> str:
    shown = ", ".join(f"`{code(nodeid)}`" for nodeid in nodeids[:FAILED_NAMED])
    return shown + (f", … {len(nodeids) - FAILED_NAMED} more" if len(nodeids) > FAILED_NAMED else "")


def _starts(report: Report, rows: int) -> list[str]:
    """Runner starts by kind, then by file (the longest start-up first)."""
    starts, walls = report["starts"], report.get("files", {})
    total = starts["total"]
    kinds = [
        [text(k), str(v["starts"]), str(v["failed"]), _seconds(v["startup_s"])]
        for k, v in starts["by_kind"].items()
    ]
    by_file = sorted(starts["by_file"].items(), key=lambda item: -item[1]["startup_s"])
    files = [
        [
            f"`{code(f)}`",
            str(v["by_kind"].get("vllm", 0)),
            str(v["by_kind"].get("hf", 0)),
            _seconds(v["startup_s"]),
            _seconds(walls[f]["wall_s"] if f in walls else None),
        ]
        for f, v in by_file
    ]
    return [
        "## Runner starts",
        "",
        f"{total['starts']} starts, {_seconds(total['startup_s'])} starting up." + _reused(total),
        "",
        *_compiled(report["records"]),
        *_refused(report.get("reuse_refusals", [])),
        *_table(["kind", "starts", "failed", "startup"], kinds, rows),
        *_table(["file", "vLLM starts", "HF starts", "startup", "tests wall"], files, rows),
    ]


def _compiled(records: list[Record]) -> list[str]:
    """The median start-up of vLLM starts whose compile caches were cold and of those they were warm."""
    seconds: dict[str, list[float]] = {"cold": [], "warm": []}
    for record in records:
        state, took = record.get("compile"), record.get("startup_s")
        if state in seconds and took is not None and record["outcome"] != "failed":
            seconds[state].append(took)
    if not any(seconds.values()):
        return []
    parts = [
        f"{state} {_seconds(statistics.median(took))} median of {len(took)}" if took else f"{state}: none"
        for state, took in seconds.items()
    ]
    return [f"vLLM starts by compile cache: {'; '.join(parts)}.", ""]


def _gpu_free(report: Report) -> list[str]:
    """The tests that held a GPU without using it (``report.gpu_free``), the longest few named."""
    found = report.get("gpu_free")
    if not found or not found["tests"]:
        return []
    tests = found["tests"]
    top = ", ".join(
        f"`{code(each['nodeid'])}` ({each['gpu_minutes']:.2f})" for each in tests[:GPU_FREE_NAMED]
    )
    more = f", … {len(tests) - GPU_FREE_NAMED} more in report.json" if len(tests) > GPU_FREE_NAMED else ""
    return [
        f"{len(tests)} GPU-free tests held GPUs for {found['gpu_minutes']:.2f} GPU-minutes (no runner, no "
        f"device memory of their own): {top}{more}.",
        "",
    ]


def _slowest(records: list[Record], rows: int) -> list[str]:
    slowest = sorted(records, key=lambda r: -(r.get("startup_s") or 0.0))[:SLOWEST]
    if not slowest:
        return []
    body = [
        [
            _seconds(r.get("startup_s")),
            text(r["kind"]),
            f"`{code(r['model'])}`",
            f"`{code(r.get('fixture') or r.get('test') or '?')}`",
            text(r.get("worker")),
            text(r["outcome"]),
        ]
        for r in slowest
    ]
    return [
        "### Slowest starts",
        "",
        *_table(["startup", "kind", "model", "owner", "worker", "outcome"], body, rows),
    ]


def _findings(findings: list[Finding], rows: int) -> list[str]:
    lines = ["## Findings", ""]
    lines += [f"- **{text(f['type'])}**: {text(f.get('message', ''))}" for f in findings[:rows]] or ["None."]
    if len(findings) > rows:
        lines.append(f"- … {len(findings) - rows} more in report.json")
    return [*lines, ""]


def _advice(advice: list[Advice], rows: int) -> list[str]:
    lines = ["## Reuse advisor", ""]
    for item in advice[:rows]:
        scope = (
            f"class `{code(item['class'])}`" if item["scope"] == "class" else f"module `{code(item['file'])}`"
        )
        tests = ", ".join(f"`{code(t)}`" for t in item["tests"])
        lines.append(
            f"- {text(item['kind'])} `{code(item['model'])}` started {item['starts']}× on "
            f"{text(item['worker'])} (phase {text(item['phase'])}) by {tests}: one "
            f"{text(item['scope'])}-scoped fixture for {scope} would save {_seconds(item['seconds_saved'])}"
        )
        if item.get("warning"):
            lines.append(f"  - ⚠️ {text(item['warning'])}")
    if len(advice) > rows:
        lines.append(f"- … {len(advice) - rows} more in report.json")
    if not advice:
        lines.append("Every runner configuration started once per file and worker.")
    return lines


def _refused(refusals: list[dict]) -> list[str]:
    """Hand-offs the reuse pool refused, by kind of reason (each one's whole reason is in report.json)."""
    if not refusals:
        return []
    reasons = "; ".join(f"{text(reason)}: {count}" for reason, count in refused_because(refusals))
    return [f"Reuse refused {len(refusals)} hand-offs ({reasons}).", ""]


def _reused(tally: Tally) -> str:
    """`` N more avoided by reuse (S saved).`` when the reuse pool handed engines on, net of the reuse
    safety net's retries (``build.starts``), then how many tries of tests ran again, for any reason, with
    their starts: a retry by class or by pytest-rerunfailures is not reuse's cost."""
    retries = tally.get("retries", 0)
    if not tally.get("reused") and not retries:
        return ""
    again = f" {retries} tries ran again, starting {tally.get('retry_starts', 0)}." if retries else ""
    return f" {tally.get('reused', 0)} more avoided by reuse ({_seconds(tally.get('saved_s'))} saved).{again}"


def _table(header: list[str], body: list[list[str]], rows: int) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in body[:rows]]
    if len(body) > rows:
        lines.append(f"\n_{len(body) - rows} more rows in report.json_")
    return [*lines, ""]


def _cap(text: str, limit: int) -> str:
    """Cut at a line boundary so the UTF-8 text stays under ``limit`` bytes."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    note = "\n\n_Summary cut to stay under the size limit; report.json has everything._\n"
    head = data[: limit - len(note.encode())].decode("utf-8", "ignore")
    return head[: head.rfind("\n")] + note


def code(value: object) -> str:
    """For a code span in a table cell: no pipe, backtick or line break of its own (``\\r`` ends a line in
    Markdown too)."""
    return str(value).replace("|", "\\|").replace("`", "'").replace("\r", " ").replace("\n", " ")


def text(value: object) -> str:
    """For prose and plain cells (outside a code span, where Markdown passes HTML through and Buildkite and
    GitHub render it): a name's or message's ``<script>`` as text."""
    return html.escape(code(value), quote=False)


def _cell(value) -> str:
    return "—" if value is None else str(value)


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.1f} s" if value < 600 else f"{value / 60:.1f} min"
