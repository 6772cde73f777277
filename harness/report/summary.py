"""``summary.md``: the short Markdown a CI user reads first, and where CI shows it.

Kept under 1 MiB (Buildkite's annotation limit; GitHub's step summary limit): long tables are cut with
a note pointing at ``report.json``, which always has everything.
"""

from __future__ import annotations

import html

from harness.ledger.reader import refused_because
from harness.platform.base import GIB
from harness.report.schema import Advice, Finding, Record, Report, Tally

LIMIT = 1024 * 1024
ROWS = 40  # rows per table before it is cut with a note
SLOWEST = 10


def render(report: Report, rows: int = ROWS, limit: int = LIMIT, opening: list[str] | None = None) -> str:
    """The Markdown summary of a report; ``opening`` (before → after a baseline) right under its title."""
    heading = _heading(report)
    lines = [
        *heading[:2],
        *(opening or []),
        *heading[2:],
        *_phases(report, rows),
        *_starts(report, rows),
        *_slowest(report["records"], rows),
        *_findings(report["findings"], rows),
        *_advice(report.get("advice", []), rows),
    ]
    return _cap("\n".join(lines) + "\n", limit)


def _heading(report: Report) -> list[str]:
    """Title (suite, platform, shard), why this platform, and the devices used."""
    platform = report["platform"]
    title = f"# harness: {report.get('suite') or 'run'} on {platform.get('name') or 'unknown platform'}"
    if report.get("shard"):
        title += f" (shard {report['shard']})"
    lines = [title, ""]
    if platform.get("reason"):
        lines += [f"Platform: {_text(platform['reason'])}", ""]
    for device in report["devices"]:
        total = device.get("total_bytes")
        size = f", {total / GIB:.1f} GiB" if total else ""
        lines.append(f"- device `{_escape(device['uuid'])}`: {_text(device.get('name') or 'unknown')}{size}")
    return [*lines, ""]


def _phases(report: Report, rows: int) -> list[str]:
    body = []
    for phase in report["phases"]:
        outcomes = phase.get("outcomes", {})
        tally = report["starts"]["by_phase"].get(phase["name"])
        kinds = tally["by_kind"] if tally else {}
        body.append(
            [
                phase["name"],
                _cell(phase.get("exit_code")) + (" (timed out)" if phase.get("timed_out") else ""),
                _seconds(phase.get("wall_s")),
                *(str(outcomes.get(k, 0)) for k in ("passed", "failed", "skipped", "error")),
                str(kinds.get("vllm", 0)),
                str(kinds.get("hf", 0)),
            ]
        )
    header = ["phase", "exit", "wall", "passed", "failed", "skipped", "error", "vLLM starts", "HF starts"]
    return ["## Phases", "", *_table(header, body, rows)]


def _starts(report: Report, rows: int) -> list[str]:
    """Runner starts by kind, then by file (the longest start-up first)."""
    starts, walls = report["starts"], report.get("files", {})
    total = starts["total"]
    kinds = [
        [k, str(v["starts"]), str(v["failed"]), _seconds(v["startup_s"])]
        for k, v in starts["by_kind"].items()
    ]
    by_file = sorted(starts["by_file"].items(), key=lambda item: -item[1]["startup_s"])
    files = [
        [
            f"`{_escape(f)}`",
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
        *_refused(report.get("reuse_refusals", [])),
        *_table(["kind", "starts", "failed", "startup"], kinds, rows),
        *_table(["file", "vLLM starts", "HF starts", "startup", "tests wall"], files, rows),
    ]


def _slowest(records: list[Record], rows: int) -> list[str]:
    slowest = sorted(records, key=lambda r: -(r.get("startup_s") or 0.0))[:SLOWEST]
    if not slowest:
        return []
    body = [
        [
            _seconds(r.get("startup_s")),
            r["kind"],
            f"`{_escape(r['model'])}`",
            f"`{_escape(r.get('fixture') or r.get('test') or '?')}`",
            str(r.get("worker")),
            r["outcome"],
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
    lines += [f"- **{_text(f['type'])}**: {_text(f.get('message', ''))}" for f in findings[:rows]] or [
        "None."
    ]
    if len(findings) > rows:
        lines.append(f"- … {len(findings) - rows} more in report.json")
    return [*lines, ""]


def _advice(advice: list[Advice], rows: int) -> list[str]:
    lines = ["## Reuse advisor", ""]
    for item in advice[:rows]:
        scope = f"class `{item['class']}`" if item["scope"] == "class" else f"module `{item['file']}`"
        tests = ", ".join(f"`{_escape(t)}`" for t in item["tests"])
        lines.append(
            f"- {item['kind']} `{_escape(item['model'])}` started {item['starts']}× on {item['worker']} "
            f"(phase {item['phase']}) by {tests}: one {item['scope']}-scoped fixture for {scope} would save "
            f"{_seconds(item['seconds_saved'])}"
        )
        if item.get("warning"):
            lines.append(f"  - ⚠️ {_text(item['warning'])}")
    if len(advice) > rows:
        lines.append(f"- … {len(advice) - rows} more in report.json")
    if not advice:
        lines.append("Every runner configuration started once per file and worker.")
    return lines


def _refused(refusals: list[dict]) -> list[str]:
    """Hand-offs the reuse pool refused, by kind of reason (each one's whole reason is in report.json)."""
    if not refusals:
        return []
    reasons = "; ".join(f"{_text(reason)}: {count}" for reason, count in refused_because(refusals))
    return [f"Reuse refused {len(refusals)} hand-offs ({reasons}).", ""]


def _reused(tally: Tally) -> str:
    """`` N more avoided by reuse (S saved).`` when the reuse pool handed engines on."""
    if not tally.get("reused"):
        return ""
    return f" {tally['reused']} more avoided by reuse ({_seconds(tally.get('saved_s'))} saved)."


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


def _escape(text: object) -> str:
    """For a table cell or a code span: no pipe, backtick or line break of its own."""
    return str(text).replace("|", "\\|").replace("`", "'").replace("\n", " ")


def _text(text: object) -> str:
    """For prose (outside a code span, where Markdown passes HTML through and Buildkite renders it): a test
    id's or message's ``<script>`` as text."""
    return html.escape(_escape(text), quote=False)


def _cell(value) -> str:
    return "—" if value is None else str(value)


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.1f} s" if value < 600 else f"{value / 60:.1f} min"
