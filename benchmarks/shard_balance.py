"""Backs docs/measurements.md § Shards: prints max/mean shard seconds for LPT and hash sharding of a
recorded run (how even are the shards?).

    python benchmarks/shard_balance.py REPORT_OR_RUN_DIR [--counts 2,4,8]

A shard's seconds are the recorded seconds of its files. The goal for LPT is max/mean <= 1.10 where the
files allow it; "bound" is the best any split can do (the longest file alone, or a perfect split).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from harness.errors import HarnessError
from harness.run.shards import assign, durations_from


def balance(durations: dict[str, float], count: int, use_history: bool) -> float:
    shards = assign(sorted(durations), count, durations if use_history else None)
    loads = [sum(durations[file] for file in shard) for shard in shards]
    return max(loads) / statistics.fmean(loads)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", help="report.json or a run directory holding one")
    parser.add_argument("--counts", default="2,4,8")
    args = parser.parse_args()
    try:
        durations = durations_from(args.report)
    except HarnessError as error:
        print(f"shard_balance: error: {error}", file=sys.stderr)
        return 2
    total = sum(durations.values())
    print(f"{args.report}: {len(durations)} files, {total:.1f} s, longest {max(durations.values()):.1f} s")
    print(f"{'N':>3} {'LPT max/mean':>13} {'hash max/mean':>14} {'bound':>7} {'LPT goal':>9}")
    for count in (int(part) for part in args.counts.split(",")):
        bound = max(max(durations.values()) / (total / count), 1.0)
        lpt, hashed = balance(durations, count, True), balance(durations, count, False)
        goal = "met" if lpt <= max(1.10, bound) else "missed"
        print(f"{count:>3} {lpt:>13.3f} {hashed:>14.3f} {bound:>7.3f} {goal:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
