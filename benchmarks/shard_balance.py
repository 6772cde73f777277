"""Backs docs/measurements.md § Shards: max/mean shard wall and engine starts summed over shards, at
N = 2, 4, 8, for pytest-shard's hash, pytest-split's least_duration and the harness's split.

    python benchmarks/shard_balance.py [--own DURATIONS] [--runs docs/runs] [--counts 2,4,8] [--seed 0]

Two suites. ``--own``: the project's own tests with their real recorded seconds (a JUnit file, a
report.json or a .test_durations, e.g. from ``pytest tests/unit --junitxml=own.xml``), no engines shared;
from a JUnit file the harness splits by whole files, as it does without a report of runner starts.
And a generated tree shaped like vLLM's ``tests/models``: 40 files, half of them with a module-scoped
engine that starts once per shard the file lands in (the start's seconds and each test's seconds drawn
from the real reports in ``--runs``). pytest-shard puts each test by a SHA-256 of its node id; pytest-split's
least_duration puts each test, longest first, on the lightest shard; the harness keeps a file's tests
together where a module-scoped fixture starts a runner (``harness.split.Groups``) and splits the rest
by test, longest first. Each splitter sees the same recorded seconds; the wall counts engine starts too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from harness import split
from harness.errors import HarnessError
from harness.report.previous import durations

Splitter = Callable[[list[str], dict[str, float], int], list[set[str]]]


def pytest_shard(nodeids: list[str], seconds: dict[str, float], count: int) -> list[set[str]]:
    shards: list[set[str]] = [set() for _ in range(count)]
    for nodeid in nodeids:
        shards[int(hashlib.sha256(nodeid.encode()).hexdigest(), 16) % count].add(nodeid)
    return shards


def least_duration(nodeids: list[str], seconds: dict[str, float], count: int) -> list[set[str]]:
    shards: list[set[str]] = [set() for _ in range(count)]
    loads = [0.0] * count
    for nodeid in sorted(nodeids, key=lambda n: -seconds.get(n, 0.0)):
        lightest = loads.index(min(loads))
        shards[lightest].add(nodeid)
        loads[lightest] += seconds.get(nodeid, 0.0)
    return shards


def harness_split(groups: split.Groups) -> Splitter:
    def run(nodeids: list[str], seconds: dict[str, float], count: int) -> list[set[str]]:
        return [set(shard) for shard in split.plan(nodeids, count, seconds, groups).shards]

    return run


def figures(
    shards: list[set[str]], seconds: dict[str, float], engines: dict[str, float]
) -> tuple[float, int]:
    """max/mean wall (tests plus the engine starts each shard makes) and starts summed over shards."""
    walls, starts = [], 0
    for shard in shards:
        files = {nodeid.split("::")[0] for nodeid in shard}
        started = [engines[file] for file in files if file in engines]
        starts += len(started)
        walls.append(sum(seconds[n] for n in shard) + sum(started))
    return max(walls) / statistics.fmean(walls), starts


def generated(runs: Path, seed: int) -> tuple[list[str], dict[str, float], dict[str, float], dict]:
    """A vLLM-shaped tree: node ids, each test's seconds, each engine file's start seconds, a report."""
    reports = [json.loads(p.read_text()) for p in sorted(runs.glob("*.json"))]
    calls = [t["call_s"] for r in reports for t in r["tests"] if t.get("call_s")]
    startups = [r["startup_s"] for rep in reports for r in rep["records"] if (r.get("startup_s") or 0) > 1]
    rng = random.Random(seed)
    nodeids, seconds, engines, records = [], {}, {}, []
    for f in range(40):
        file = f"tests/models/language/test_m{f:02d}.py"
        shared = f % 2 == 0
        if shared:
            engines[file] = rng.choice(startups)
        for t in range(rng.randint(2, 16)):
            nodeid = f"{file}::test_model[{t}]"
            nodeids.append(nodeid)
            seconds[nodeid] = rng.choice(calls)
            if shared and t == 0:
                records.append({"test": nodeid, "scope": "module", "fingerprint": f"{f:012x}"})
    return nodeids, seconds, engines, {"records": records, "tests": []}


def table(name: str, nodeids, seconds, engines, history, counts) -> None:
    print(
        f"\n{name}: {len(nodeids)} tests, {sum(seconds.values()):.1f} s of tests, {len(engines)} engine files"
    )
    splitters = {
        "pytest-shard": pytest_shard,
        "least_duration": least_duration,
        "harness": harness_split(history),
    }
    header = "  ".join(f"{s + ' max/mean':>24} {'starts':>6}" for s in splitters)
    print(f"{'N':>3}  {header}  {'best for its units':>18}")
    for count in counts:
        row = [figures(split_(nodeids, seconds, count), seconds, engines) for split_ in splitters.values()]
        cells = "  ".join(f"{ratio:>24.3f} {starts:>6}" for ratio, starts in row)
        print(f"{count:>3}  {cells}  {bound(nodeids, seconds, engines, history, count):>18.3f}")


def bound(nodeids, seconds, engines, history, count: int) -> float:
    """The best max/mean any split of the harness's units reaches: its heaviest unit against the mean."""
    units: dict[str, float] = {}
    for nodeid in nodeids:
        unit = history.unit(nodeid)
        units[unit] = units.get(unit, engines.get(nodeid.split("::")[0], 0.0)) + seconds[nodeid]
    return max(1.0, max(units.values()) / (sum(units.values()) / count))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--own", help="the project's own tests' durations (JUnit, report.json, .test_durations)"
    )
    parser.add_argument("--runs", type=Path, default=Path(__file__).parents[1] / "docs" / "runs")
    parser.add_argument("--counts", default="2,4,8")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    counts = [int(part) for part in args.counts.split(",")]
    if args.own:
        try:
            found = durations(args.own)
            seconds, source, history = dict(found.seconds), found.kind, found.groups
        except HarnessError as error:
            print(f"shard_balance: error: {error}", file=sys.stderr)
            return 2
        # a JUnit file or .test_durations records no runners: the harness keeps whole files together
        table(f"own suite ({source})", sorted(seconds), seconds, {}, history, counts)
    nodeids, seconds, engines, report = generated(args.runs, args.seed)
    table("generated tests/models tree", nodeids, seconds, engines, split.Groups(report), counts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
