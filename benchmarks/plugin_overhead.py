"""Backs README.md § What it costs, what it saves and docs/measurements.md § Plugin overhead: the wall
ratio of 2000 trivial tests with the harness asked vs plain pytest (goal <= 1.05), with its 95 % interval.

    python benchmarks/plugin_overhead.py [--tests 2000] [--rounds 15] [--instructions [--keep DIR]]
        [--with ARGS] [--together] [--one-blas-thread]

Both variants run as fresh ``python -m pytest`` processes over the same generated file, on the platform
detected here (or ``HARNESS_PLATFORM``); "plain" is ``-p no:harness``. "with" (``--harness``) writes the
ledger (one ``test`` line per test) into a temporary directory, as ``harness run`` does.

A round runs the two in the order plain, with, with, plain (the next round the other way round), so a
host whose speed drifts within a round slows both sides alike; each side's faster run counts, since
another process on the host only ever slows a run. The figure is the median of the rounds' ratios. Each
round's walls are printed so noise is visible; the ratio of the medians and the CPU seconds' ratio are
printed above the figure. ``--with`` gives the other side other pytest arguments. ``--together`` starts
each round's plain and with runs at the same moment, in two pairs (one launched plain first, the other
with first), so both sides of a pair meet the host's load of that moment. ``--instructions`` also counts
the instructions each variant executes, one run each under valgrind's cachegrind: a figure no other load
on the host moves (it leaves out kernel time); ``--keep DIR`` keeps cachegrind's per-function files
there. ``--one-blas-thread`` times both sides with one BLAS thread, as the counted runs have: on a host
where a third-party plugin imports numpy in every pytest run, its OpenBLAS pool spins beside pytest.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from trivial import PYTEST, environment, ledger, median_interval, suite, timed, timed_together

# a counted run's settings: a fixed hash seed, and one BLAS thread: on the GPU host a plugin imports numpy,
# whose OpenBLAS pool of 15 threads spins ~1.05 G instructions a run, a count that moves by 45 M between runs
ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
COUNTED = {"PYTHONHASHSEED": "0", **ONE_BLAS_THREAD}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--instructions", action="store_true", help="also count instructions (valgrind)")
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        metavar="DIR",
        help="with --instructions: keep cachegrind's files, DIR/plain.cg and DIR/with.cg, for cg_annotate",
    )
    parser.add_argument("--with", dest="other", default="--harness", help="the other side's pytest arguments")
    parser.add_argument(
        "--together", action="store_true", help="run each round's two sides at once, in pairs"
    )
    parser.add_argument(
        "--one-blas-thread", action="store_true", help="time both sides with one BLAS thread (OPENBLAS, OMP)"
    )
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        ledgers = Path(directory)  # beside the suite, not in it (see trivial.suite)
        root, env = suite(ledgers, options.tests), environment()
        if options.one_blas_thread:
            env.update(ONE_BLAS_THREAD)
        plain_args, with_args = ["-p", "no:harness"], options.other.split()
        timed(plain_args, root, env)  # warm the file system cache and bytecode
        timed(with_args + ledger(with_args, ledgers / "warm"), root, env)
        sides = {"plain": plain_args, "with": with_args}
        walls, cpus, ratios = measure(options.rounds, sides, root, ledgers, env, options.together)
        plain, with_plugin = (statistics.median(walls[name]) for name in ("plain", "with"))
        cpu_plain, cpu_with = (statistics.median(cpus[name]) for name in ("plain", "with"))
        print(
            f"CPU seconds, median of {options.rounds}: plain {cpu_plain:.2f}, with plugin {cpu_with:.2f}, "
            f"ratio {cpu_with / cpu_plain:.3f}"
        )
        print(f"ratio of the medians: {with_plugin / plain:.3f}")
        if options.instructions:
            counted = {
                "plain": instructions(plain_args, root, env, options.keep and options.keep / "plain.cg"),
                "with": instructions(
                    with_args + ledger(with_args, ledgers / "counted"),
                    root,
                    env,
                    options.keep and options.keep / "with.cg",
                ),
            }
            print(
                f"instructions, one run each: plain {counted['plain'] / 1e9:.3f} G, with plugin "
                f"{counted['with'] / 1e9:.3f} G, ratio {counted['with'] / counted['plain']:.3f}"
            )
        low, high = median_interval(ratios)
        print(
            f"{options.tests} trivial tests, median of {options.rounds}: plain {plain:.2f} s, "
            f"with plugin {with_plugin:.2f} s, ratio {statistics.median(ratios):.3f} "
            f"(the rounds' median, 95 % interval {low:.3f}-{high:.3f}; goal <= 1.05)"
        )


def measure(
    rounds: int, sides: dict[str, list[str]], root: Path, ledgers: Path, env: dict, together: bool
) -> tuple:
    """Each side's best wall and CPU seconds per round, and the rounds' with/plain ratios."""
    walls: dict[str, list[float]] = {"plain": [], "with": []}
    cpus: dict[str, list[float]] = {"plain": [], "with": []}
    ratios = []
    for round_ in range(rounds):
        order = ["plain", "with", "with", "plain"] if round_ % 2 == 0 else ["with", "plain", "plain", "with"]
        args = [
            sides[name] + ledger(sides[name], ledgers / f"ledger{round_}-{n}") for n, name in enumerate(order)
        ]
        if together:
            measured = timed_together(args[:2], root, env) + timed_together(args[2:], root, env)
        else:
            measured = [timed(run, root, env) for run in args]
        for name in walls:
            walls[name].append(min(wall for n, (wall, _) in enumerate(measured) if order[n] == name))
            cpus[name].append(min(cpu for n, (_, cpu) in enumerate(measured) if order[n] == name))
        plain, with_plugin = walls["plain"][-1], walls["with"][-1]
        ratios.append(with_plugin / plain)
        print(f"round {round_ + 1}: plain {plain:.2f} s, with plugin {with_plugin:.2f} s")
    return walls, cpus, ratios


def instructions(args: list[str], cwd: Path, env: dict, keep: Path | None = None) -> int:
    """Instructions one pytest process executes, counted by cachegrind (``COUNTED``'s settings); its
    per-function file is written to ``keep`` when given."""
    if shutil.which("valgrind") is None:
        raise SystemExit("plugin_overhead.py: --instructions needs valgrind on PATH")
    if keep is not None:
        keep.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            f"--cachegrind-out-file={keep or '/dev/null'}",
            *PYTEST,
            *args,
        ],
        cwd=cwd,
        env={**env, **COUNTED},
        check=True,
        capture_output=True,
        text=True,
    )
    return pytest_refs(done.stderr)


def pytest_refs(report: str) -> int:
    """The instructions of the process valgrind started, from its report: a plugin that forks (one on the
    GPU host's image does) adds a summary of the child's, printed first, under the child's pid."""
    started = re.search(r"^==(\d+)== Command:", report, re.MULTILINE)
    found = started and re.search(rf"^=={started.group(1)}== I\s+refs:\s+([\d,]+)", report, re.MULTILINE)
    if not found:
        raise SystemExit("plugin_overhead.py: cachegrind printed no instruction count for pytest")
    return int(found.group(1).replace(",", ""))


if __name__ == "__main__":
    main()
