"""What the harness adds to a pytest session, apart from its cost per test: the fixed part of
benchmarks/plugin_overhead.py's ratio, and where it goes.

    python benchmarks/session_cost.py [--runs 10] [--platforms cpu,cuda]

For each platform (``HARNESS_PLATFORM``) it runs one trivial test ``--runs`` times with ``--harness`` and
with ``-p no:harness`` and prints each side's fastest wall and CPU seconds (the host's load only ever
slows a run), and what 2000 appends of a test line to a file cost this host's kernel (the ledger makes one
a test, so that a killed worker loses nothing). Then, once per platform, ``python -X importtime`` of the
harness side: the modules the harness side imports that plain pytest does not, by their cumulative import
time, largest first. The plugins pytest loads (plain pytest's own baseline) are listed once.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trivial import PYTEST, environment, suite, timed


def imports(args: list[str], cwd: Path, env: dict) -> dict[str, int]:
    """Cumulative import time in microseconds of every top-level import of one run (``-X importtime``;
    ``-s`` keeps pytest from capturing what its plugins' imports print)."""
    command = [sys.executable, "-X", "importtime", *PYTEST[1:], "-s", *args]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    found = re.findall(r"^import time:\s+\d+ \|\s+(\d+) \| ( *)(\S+)$", done.stderr, re.MULTILINE)
    return {name: int(cumulative) for cumulative, depth, name in found if not depth}


def appends(directory: Path, count: int = 2000) -> float:
    """Seconds ``count`` unbuffered appends of a ledger-sized line take, as the ledger writes them."""
    line = b'{"event": "test", "t": 1796110196.131, "nodeid": "tests/test_x.py::test_y[a-b]", ' * 2 + b"}\n"
    descriptor = os.open(directory / "appends.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        started = time.perf_counter()
        for _ in range(count):
            os.write(descriptor, line)
        return time.perf_counter() - started
    finally:
        os.close(descriptor)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--platforms", default="cpu,cuda")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        root, env = suite(Path(directory), 1), environment()
        plain = ["-p", "no:harness"]
        versions = subprocess.run([*PYTEST[:3], "-VV"], cwd=root, env=env, capture_output=True, text=True)
        print("pytest and its plugins here:", " ".join(versions.stdout.split()))
        print(f"2000 appends of a test line: {min(appends(Path(directory)) for _ in range(3)) * 1e3:.1f} ms")
        for platform in options.platforms.split(","):
            here = {**env, "HARNESS_PLATFORM": platform}
            harness = ["--harness", f"--harness-ledger-dir={Path(directory) / platform}"]
            try:
                timed(plain, root, here), timed(harness, root, here)  # warm caches and bytecode
            except subprocess.CalledProcessError as error:
                print(f"{platform}: pytest exited {error.returncode}; this host cannot be that platform")
                continue
            runs = {name: [timed(args, root, here) for _ in range(options.runs)] for name, args in
                    (("plain", plain), ("harness", harness))}  # fmt: skip
            (wall, cpu), (wall_h, cpu_h) = (
                (min(w for w, _ in runs[name]) * 1e3, min(c for _, c in runs[name]) * 1e3)
                for name in ("plain", "harness")
            )
            print(
                f"{platform}: one test, fastest of {options.runs}: plain {wall:.0f} ms wall "
                f"({cpu:.0f} ms CPU), with the harness {wall_h:.0f} ms ({cpu_h:.0f} ms CPU): "
                "the session costs "
                f"{wall_h - wall:+.0f} ms wall, {cpu_h - cpu:+.0f} ms CPU"
            )
            base, added = imports(plain, root, here), imports(harness, root, here)
            extra = sorted(((us, name) for name, us in added.items() if name not in base), reverse=True)
            shown = ", ".join(f"{name} {us / 1e3:.1f}" for us, name in extra[:8])
            print(f"  imported only with the harness (ms, cumulative): {shown or 'nothing'}")


if __name__ == "__main__":
    main()
