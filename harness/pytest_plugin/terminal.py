"""The terminal summary of a session's runner starts and findings, read back from the ledger directory
(under xdist the controller reads every worker's files, so a worker that was killed still counts)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING

import pytest

from harness import ledger
from harness.pytest_plugin.recorder import DIRECTORY, STARTED, TEMPORARY
from harness.pytest_plugin.session import process_context

if TYPE_CHECKING:
    from harness.ledger.records import Record


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    if DIRECTORY not in config.stash or hasattr(config, "workerinput"):
        return
    writer = process_context(config).writer
    if (writer is not None and writer.alone_and_quiet()) or ledger.quiet(config.stash[DIRECTORY]):
        return  # the common case, told without reading every test's events back
    since = config.stash[STARTED]
    merged = ledger.read(config.stash[DIRECTORY])
    records = [r for r in merged.records if r["start"] >= since]
    # a finding the reader made of a bad line has no time of its own: shown, as this session read it
    findings = [f for f in merged.findings if f.get("t", since) >= since]
    if not records and not findings:
        return  # a session that started no runner has nothing to account for
    started = ledger.started(records)
    write = terminalreporter.write_line
    terminalreporter.write_sep("=", "harness: runner starts")
    blocked = sum(r["outcome"] == "blocked" for r in records)
    failed = sum(r["outcome"] == "failed" for r in records)
    kept = "temporary, removed at exit" if config.stash[TEMPORARY] else config.stash[DIRECTORY]
    reuses = [r for r in merged.reuses if r["t"] >= since]
    reruns = [r for r in merged.reruns if r["t"] >= since]
    avoided = _avoided(records, reuses, reruns) if reuses or reruns else ""
    write(
        f"{len(started)} runner starts ({_by_kind(started)}), {blocked} blocked, {failed} failed{avoided}; "
        f"ledger: {kept}"
    )
    if reruns:
        tests = {r["test"]: r["result"] for r in reruns}
        passed = sum(result == "passed" for result in tests.values())
        write(
            f"  retried {len(reruns)}x ({len(tests)} tests): {passed} passed only through a retry, "
            f"{len(tests) - passed} failed anyway; the retries started {sum(r['starts'] for r in reruns)}"
        )
    refusals = [r for r in merged.refusals if r["t"] >= since]
    if refusals:
        reasons = ", ".join(f"{count} {reason}" for reason, count in ledger.refused_because(refusals))
        write(f"  reuse refused {len(refusals)}: {reasons}")
    per_file: dict[str, list[Record]] = defaultdict(list)
    for record in started:
        per_file[record.get("file") or "<outside tests>"].append(record)
    for file, in_file in sorted(per_file.items()):
        write(f"  {file}: {len(in_file)} ({_by_kind(in_file)})")
        repeated = Counter((r["kind"], r["model"], r["fingerprint"]) for r in in_file)
        for (kind, model, fingerprint), count in sorted(repeated.items()):
            if count > 1:
                write(f"    started {count}x in this file: {kind} {model} [{fingerprint}]")
    if findings:
        terminalreporter.write_sep("-", f"harness: {len(findings)} findings")
        for finding in findings:
            write(f"  {finding['type']}: {finding['message']}")


def _avoided(records: list[Record], reuses: list[dict], reruns: list[dict]) -> str:
    """Starts avoided by reuse and their seconds, as report.json counts them (``build.starts``: net of the
    reuse safety net's retries, which a run without reuse would not make); empty where reuse did nothing.
    The report's modules load only here: a session that started no runner loads only what it writes with."""
    from harness.report import build

    replayed = len(build.replays(reruns))
    if not reuses and not replayed:
        return ""
    total = build.starts(records, reuses, reruns)["total"]
    net = f", net of {replayed} retries" if replayed else ""
    return f", {total['reused']} avoided by reuse ({total['saved_s']:.1f} s saved{net})"


def _by_kind(records: list[Record]) -> str:
    counts = Counter(r["kind"] for r in records)
    return ", ".join(f"{kind} {count}" for kind, count in sorted(counts.items())) or "none"
