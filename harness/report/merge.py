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
import json
import os
import sys
from pathlib import Path

from harness.errors import HarnessError, InfrastructureError
from harness.report import baseline as before_after
from harness.report import summary
from harness.report.compare import Gate, load_checked
from harness.report.publish import publish
from harness.report.store import write_atomic
from harness.report.union import line, merge


def main(args: argparse.Namespace) -> int:
    gates = [Gate.parse(spec) for spec in args.fail_on_regression]
    if gates and not args.baseline:
        raise HarnessError("--fail-on-regression needs --baseline: what would this build be worse than?")
    before_after.refuse_itself(args.out, args.baseline)
    report = merge([load_checked(shard) for shard in args.shards], list(args.shards))
    out = Path(args.out)
    accounting = report.get("accounting")
    said = line(accounting, f"{len(args.shards)} shards") if accounting else None
    opening = [html.escape(said, quote=False), ""] if said else []  # node ids are text, not markup
    text = summary.render(report, opening=opening + before_after.lines(report, args.baseline))
    try:
        write_atomic(out / "report.json", json.dumps(report, indent=1, allow_nan=False) + "\n")
        write_atomic(out / "summary.md", text)
    except OSError as error:
        raise InfrastructureError(
            f"{out}: cannot write the merged report ({error.strerror or error})"
        ) from None
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
