"""What the harness costs a test and a session, in wall time, from the fastest of several runs at two suite
sizes: a test's cost is the slope between the sizes, a session's the rest. The fastest run is the one the
host's other load slowed least; a host whose own speed drifts still moves the figures (a freshly started
H200 machine by ~80 ms a session, this 2-core machine by over 100 µs a test).

    python benchmarks/per_test_cost.py [--sizes 200,4000] [--runs 8] [--platform cpu]

plain is ``-p no:harness``; the harness side runs ``--harness`` with a fresh ledger each run, on
``--platform`` (``HARNESS_PLATFORM``). The runs alternate between the sides and the sizes.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from trivial import environment, ledger, suite, timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200,4000")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--platform", default="cpu")
    options = parser.parse_args()
    small, large = (int(size) for size in options.sizes.split(","))
    with tempfile.TemporaryDirectory() as directory:
        roots = {size: suite(Path(directory) / str(size), size) for size in (small, large)}
        env = {**environment(), "HARNESS_PLATFORM": options.platform}
        sides = {"plain": ["-p", "no:harness"], "harness": ["--harness"]}
        best: dict[tuple[str, int], float] = {}
        for run in range(options.runs + 1):  # run 0 warms caches and bytecode and is not counted
            for size in (small, large):
                for side, args in sides.items():
                    wall, _ = timed(args + ledger(args, Path(directory) / f"l{run}-{size}"), roots[size], env)
                    if run:
                        best[side, size] = min(best.get((side, size), wall), wall)
        per_test = {side: (best[side, large] - best[side, small]) / (large - small) for side in sides}
        session = {side: best[side, small] - per_test[side] * small for side in sides}
        for side in sides:
            print(f"{side}: {per_test[side] * 1e6:.1f} µs a test, {session[side] * 1e3:.0f} ms a session")
        added_test, added_session = (
            per_test["harness"] - per_test["plain"],
            session["harness"] - session["plain"],
        )
        at_2000 = session["plain"] + 2000 * per_test["plain"]  # plain's wall for 2000 tests, on the line
        print(
            f"the harness ({options.platform}) adds {added_test * 1e6:+.1f} µs a test "
            f"({added_test / per_test['plain'] * 100:+.1f} %) and {added_session * 1e3:+.0f} ms a session; "
            f"for 2000 tests, {(2000 * added_test + added_session) / at_2000 * 100:+.1f} % "
            f"(fastest of {options.runs} runs each)"
        )


if __name__ == "__main__":
    main()
