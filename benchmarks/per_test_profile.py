"""Where a harness session's time per test goes on this host: cProfile of one in-process pytest run of
trivial tests, with the harness and without it, compared function by function.

    python benchmarks/per_test_profile.py [--tests 2000] [--top 15]

It prints the functions called at least once a test whose own time (cProfile's ``tottime``) grew most with
the harness, with their call counts on each side: the per-test part of benchmarks/plugin_overhead.py's
ratio, named. cProfile slows every call alike, so read the figures against each other, not as walls.
"""

from __future__ import annotations

import argparse
import pstats
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from trivial import PYTEST, environment, suite

RUN = """
import cProfile, sys, pytest
cProfile.run("pytest.main(sys.argv[2:])", sys.argv[1])
"""


def profile(out: Path, args: list[str], cwd: Path) -> dict:
    """cProfile's stats of one pytest session in a fresh process, keyed by (file, line, function)."""
    command = [sys.executable, "-c", RUN, str(out), *PYTEST[3:], *args]  # PYTEST's arguments, in process
    subprocess.run(command, cwd=cwd, env=environment(), check=True, capture_output=True)
    stats = pstats.Stats(str(out)).stats  # type: ignore[attr-defined]
    # a built-in's name carries its type's address, which differs between the two processes
    return {(file, line, re.sub(r" at 0x[0-9a-f]+", "", name)): s for (file, line, name), s in stats.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--top", type=int, default=15)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        root = suite(Path(directory), options.tests)
        plain = profile(Path(directory) / "plain.prof", ["-p", "no:harness"], root)
        harness = profile(Path(directory) / "harness.prof", ["--harness"], root)
    grown = []
    for key, (_, calls, own, _, _) in harness.items():
        before = plain.get(key, (0, 0, 0.0, 0, {}))
        if calls >= options.tests:
            grown.append((own - before[2], calls, before[1], key))
    print(f"{options.tests} trivial tests, the functions whose own time grew most with the harness:")
    for extra, calls, calls_before, (file, line, function) in sorted(grown, reverse=True)[: options.top]:
        where = file if file == "~" else f"{Path(file).parent.name}/{Path(file).name}:{line}"
        print(f"  {extra * 1e3:+7.1f} ms  {calls:6d} calls (plain {calls_before:6d})  {where} {function}")


if __name__ == "__main__":
    main()
