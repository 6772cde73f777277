"""What a test's ledger line costs inside a pytest run, mapped (``harness.ledger.files.Mapped``, the
harness's way) against one ``write`` system call a line (``Appended``, its fallback and the way before):
both in each of several harness sessions of trivial tests, a block of tests each in turn
(benchmarks/line_toggle.py), so the per-process speed of a noisy host falls on both alike.

    python benchmarks/line_in_situ.py [--tests 2000] [--runs 5]

Printed: each session's median wall a test for each kind, and the median of the sessions' differences.
A loop of bare writes (benchmarks/host_costs.py) gives a call's cost alone; here it runs among pytest's
own work, whose caches the kernel's entry cools.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from trivial import PYTEST, environment, suite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory() as directory:
        root, out = suite(Path(directory), options.tests), Path(directory) / "toggle.jsonl"
        env = {**environment(), "LINE_TOGGLE_FILE": str(out)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(here), env.get("PYTHONPATH")]))
        for run in range(options.runs):
            ledger = f"--harness-ledger-dir={Path(directory) / f'ledger{run}'}"
            subprocess.run(
                [*PYTEST, "-p", "line_toggle", "--harness", ledger],
                cwd=root,
                env=env,
                check=True,
                capture_output=True,
            )
        sessions = [json.loads(line) for line in out.read_text().splitlines()]
    for n, session in enumerate(sessions, 1):
        mapped, appended = session["mapped"], session["appended"]
        print(f"session {n}: a test {mapped:.1f} µs with its line mapped, {appended:.1f} µs written")
    saved = statistics.median(s["appended"] - s["mapped"] for s in sessions)
    print(f"a test's line mapped instead of written: {saved:+.1f} µs a test less (median of {len(sessions)})")


if __name__ == "__main__":
    main()
