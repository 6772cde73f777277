"""``harness merge SHARD... --out DIR``: one suite's report from the reports of its shards (the parallel CI
jobs of one build, ``harness.report.union``), its summary opening with the accounting of the shards'
tests and before → after against ``--baseline``.

Exit codes: 2 for shards that cannot be one suite's (bad input: two splits, a shard given twice or
missing, another suite, platform or commit); 1 when the merged report is written but the proof failed
(a test that ran in no shard or in two: tests did not run as asked) or a ``--fail-on-regression`` gate
tripped; else 0.
"""

from __future__ import annotations

import argparse
import html
import os
import sys

from harness.errors import HarnessError
from harness.report import baseline as before_after
from harness.report import junit, summary
from harness.report.compare import Gate, load_checked
from harness.report.finalize import write
from harness.report.out import directory
from harness.report.publish import publish
from harness.report.union import line, merge


def main(args: argparse.Namespace) -> int:
    gates = [Gate.parse(spec) for spec in args.fail_on_regression]
    if gates and not args.baseline:
        raise HarnessError("--fail-on-regression needs --baseline: what would this build be worse than?")
    out = directory(args.out, inputs=args.shards)  # never onto a shard's own report
    before_after.refuse_itself(args.out, args.baseline)
    report = merge([load_checked(shard) for shard in args.shards], list(args.shards))
    accounting = report.get("accounting")
    said = line(accounting, f"{len(args.shards)} shards") if accounting else None
    opening = [html.escape(said, quote=False), ""] if said else []  # node ids are text, not markup
    text = summary.render(report, opening=opening + before_after.lines(report, args.baseline))
    junit_xml = junit.merge(
        out / "junit", report["records"], report["tests"], reruns=report.get("reruns", [])
    )
    write(out, report, text, junit_xml)  # the one writer: every field the shards' reports hold
    publish(text, report, os.environ)
    total = report["starts"]["total"]
    shown = f"{len(args.shards)} shards, {len(report['tests'])} tests, {total['starts']} runner starts"
    print(f"{out / 'report.json'}: {shown}")
    failed = bool(accounting) and accounting["proven"] is False  # type: ignore[index]
    if said:
        print(f"harness: {said}", file=sys.stderr if failed else sys.stdout)
    result, _ = before_after.against(report, args.baseline, gated=bool(gates))
    reasons = [reason for gate in gates if result is not None and (reason := gate.regression(result))]
    for reason in reasons:
        print(f"harness: regression: {reason}", file=sys.stderr)
    return 1 if reasons or failed else 0
