"""Python lines each side of plugin_overhead.py executes, and where the harness's side executes more.

    python benchmarks/python_lines.py [--tests 2000] [--top 25] [--with ARGS]

A count no load on the host moves, and one that runs wherever pytest does (cachegrind's instruction count
needs valgrind and a Python it can read): each side runs once as a fresh pytest process under a line
tracer (``sys.settrace``), over the same generated suite as plugin_overhead.py. It prints both totals,
their ratio, and the functions whose line count differs most, with the difference in their calls.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from trivial import ARGS, environment, ledger, suite, timed

# run as ``python -c``: count each function's calls and lines until exit, then write them as JSON
TRACER = """
import atexit, collections, json, sys
counts = collections.Counter()
def local(frame, event, arg):
    if event == "line":
        counts[(frame.f_code.co_filename, frame.f_code.co_name, "lines")] += 1
    return local
def tracer(frame, event, arg):
    counts[(frame.f_code.co_filename, frame.f_code.co_name, "calls")] += 1
    return local
def dump():
    sys.settrace(None)
    with open(sys.argv[1], "w") as file:
        json.dump([[*key, value] for key, value in counts.items()], file)
atexit.register(dump)
sys.settrace(tracer)
import pytest
sys.exit(pytest.main(sys.argv[2:]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--top", type=int, default=25, help="how many functions to list")
    parser.add_argument("--with", dest="other", default="--harness", help="the other side's pytest arguments")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        root, env = suite(Path(directory), options.tests), environment()
        sides = {"plain": ["-p", "no:harness"], "with": options.other.split()}
        for args in sides.values():  # the suite's rewritten bytecode is cached by the first run, untraced
            timed(args + ledger(args, Path(directory) / "warm"), root, env)
        counts = {
            name: counted(args + ledger(args, Path(directory) / "ledger"), root, env, Path(directory) / name)
            for name, args in sides.items()
        }
    lines = {name: sum(v for key, v in found.items() if key[2] == "lines") for name, found in counts.items()}
    print(
        f"{options.tests} trivial tests, Python lines executed: plain {lines['plain']:,}, "
        f"with plugin {lines['with']:,}, ratio {lines['with'] / lines['plain']:.4f}"
    )
    plain, other = counts["plain"], counts["with"]
    functions = {key[:2] for key in plain.keys() | other.keys()}
    difference = sorted(functions, key=lambda f: other[(*f, "lines")] - plain[(*f, "lines")], reverse=True)[
        : options.top
    ]
    print("lines more  calls more  function")
    for function in difference:
        more = [other[(*function, kind)] - plain[(*function, kind)] for kind in ("lines", "calls")]
        print(f"{more[0]:10,}  {more[1]:10,}  {function[1]} ({short(function[0])})")


def counted(args: list[str], root: Path, env: dict, out: Path) -> collections.Counter:
    """One side's (file, function, "lines" | "calls") counts."""
    subprocess.run(
        [sys.executable, "-c", TRACER, str(out), *ARGS, *args],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
    )
    return collections.Counter({tuple(key): value for *key, value in json.loads(out.read_text())})


def short(filename: str) -> str:
    """A file's name from its package on: where the interpreter keeps it differs between hosts."""
    for marker in ("site-packages/", "dist-packages/", "harness-site/", "/lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


if __name__ == "__main__":
    main()
