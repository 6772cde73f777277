"""``harness merge SHARD... --out DIR``: one suite's report from the reports of its shards (the parallel CI
jobs of one build, ``harness.report.shards``), its summary opening with before → after against
``--baseline``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from harness.errors import HarnessError, InfrastructureError
from harness.report import baseline as before_after
from harness.report import summary
from harness.report.compare import Gate, load_checked
from harness.report.publish import publish
from harness.report.shards import merge
from harness.report.store import write_atomic


def main(args: argparse.Namespace) -> int:
    gates = [Gate.parse(spec) for spec in args.fail_on_regression]
    if gates and not args.baseline:
        raise HarnessError("--fail-on-regression needs --baseline: what would this build be worse than?")
    report = merge([load_checked(shard) for shard in args.shards], list(args.shards))
    out = Path(args.out)
    text = summary.render(report, opening=before_after.lines(report, args.baseline))
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
    result, _ = before_after.against(report, args.baseline)
    reasons = [reason for gate in gates if result is not None and (reason := gate.regression(result))]
    for reason in reasons:
        print(f"harness: regression: {reason}", file=sys.stderr)
    return 1 if reasons else 0
