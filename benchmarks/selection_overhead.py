"""Backs docs/selection.md § What footprints cost: the wall and CPU ratio of a session with footprints
(``--harness``, as harness run records them) against the same session without (``HARNESS_FOOTPRINTS=0``),
on two suites: the plugin overhead benchmark's trivial tests (the per-test cost: a profiler switch, its
entries read, an environment variable set) and tests that make many Python calls (the per-call cost of
the C profiler), with the median's 95 % interval.

    python benchmarks/selection_overhead.py [--tests 2000] [--calls 200000] [--rounds 9]

A round runs off, on, on, off (the next round the other way round) as plugin_overhead.py does; each side's
faster run counts. The issue's bound is 5 % of a run's wall time, printed as "N % of the run's wall"
((on - off) / on at the median ratio). The recorder is this Python's (``sys.monitoring`` on 3.12+,
``cProfile`` on 3.11: the first line says which). A suite of real engine tests spends its time in C (torch,
the engine's processes), so these two suites are its worst cases; benchmarks/gpu/footprint_cost.sh times
a real CUDA suite.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
from pathlib import Path

from trivial import FILE, environment, ledger, median_interval, suite, timed

from harness.select import profiler


def calling_suite(directory: Path, tests: int, calls: int) -> Path:
    """``tests`` tests that each make ``calls`` Python calls into a helper module of the suite."""
    root = directory / "calling"
    root.mkdir(parents=True)
    (root / "helper.py").write_text(
        "def step(n):\n    return n + 1\n\n\ndef work(calls):\n"
        "    total = 0\n    for n in range(calls):\n        total = step(total)\n"
        "    return total\n"
    )
    (root / FILE).write_text(
        "from helper import work\n\n\n"
        + "".join(f"def test_{n}():\n    assert work({calls}) == {calls}\n\n\n" for n in range(tests))
    )
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n')
    return root


def measure(root: Path, rounds: int, scratch: Path) -> tuple[float, tuple[float, float], float]:
    """The median wall ratio on/off, its interval, and the median CPU ratio."""
    env = environment()
    sides = {"off": {**env, "HARNESS_FOOTPRINTS": "0"}, "on": {**env, "HARNESS_FOOTPRINTS": "1"}}
    walls, cpus = [], []
    for number in range(rounds):
        order = ["off", "on", "on", "off"] if number % 2 == 0 else ["on", "off", "off", "on"]
        best: dict[str, tuple[float, float]] = {}
        for n, side in enumerate(order):
            args = ["--harness", *ledger(["--harness"], scratch / f"{number}-{n}")]
            wall, cpu = timed(args, root, sides[side])
            best[side] = min(best.get(side, (wall, cpu)), (wall, cpu))
        walls.append(best["on"][0] / best["off"][0])
        cpus.append(best["on"][1] / best["off"][1])
        print(f"  round {number + 1}: off {best['off'][0]:.2f} s, on {best['on'][0]:.2f} s", file=sys.stderr)
    return statistics.median(walls), median_interval(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument(
        "--calls", type=int, default=200_000, help="Python calls per test of the calling suite"
    )
    parser.add_argument("--calling-tests", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    recorder = type(profiler.recorder(profiler.Paths({}))).__name__
    print(f"Python {platform.python_version()}, recorder {recorder} (harness.select.profiler)")
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        suites = {
            f"{args.tests} trivial tests": suite(scratch / "a", args.tests),
            f"{args.calling_tests} tests of {args.calls} Python calls each": calling_suite(
                scratch / "b", args.calling_tests, args.calls
            ),
        }
        for name, root in suites.items():
            wall, (low, high), cpu = measure(root, args.rounds, scratch / "ledgers")
            print(
                f"{name}: footprints cost x{wall:.3f} wall (95 % interval {low:.3f}-{high:.3f}), "
                f"x{cpu:.3f} CPU; {1 - 1 / wall:.1%} of the run's wall"
            )


if __name__ == "__main__":
    main()
