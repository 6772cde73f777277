"""Backs docs/measurements.md § Engine reuse: vLLM starts and wall of the naive pooling example with and
without engine reuse, next to the shipped suite; prints the table and ``reuse: starts N of M distinct``.

    python benchmarks/reuse.py [--out DIR] [--runs shipped,naive-off,naive-on,naive-history]

Four ``harness run`` calls on this machine's platform, one after another, each a real run with real
engines (on the 2-core CPU host ~30 s per vLLM start, about ten minutes in all):
- ``pooling`` (the shipped suite: one engine per configuration by its fixtures' scopes);
- ``pooling-naive`` with reuse off (every test starts its own engine);
- ``pooling-naive`` with reuse on (``HARNESS_REUSE=1``);
- ``pooling-naive`` with reuse on and the reuse-off run as history (``--durations-from``), so tests that
  started one configuration run one after another.
Wall is the sum of the run's phase walls (what ``harness compare`` shows). Distinct configurations are the
distinct vLLM fingerprints the reuse-off run started. The last line is the figure the goal is set on:
``reuse: starts N of M distinct, wall R× the shipped suite`` for the run with reuse and history.
``--runs`` runs some of them into ``--out``; a run left out is read from ``--out`` where an earlier call put
it (the H200's ten-minute device calls take the four in two), and the table shows the runs it has.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.ledger.reader import started  # noqa: E402
from harness.report.store import load  # noqa: E402

# key (its run directory under --out): (row name, suite, reuse on, extra harness run arguments)
RUNS = {
    "shipped": ("pooling (shipped)", "pooling", False),
    "naive-off": ("naive, reuse off", "pooling-naive", False),
    "naive-on": ("naive, reuse on", "pooling-naive", True),
    "naive-history": (
        "naive, reuse on + history",
        "pooling-naive",
        True,
        "--durations-from",
        "{out}/naive-off",
    ),
}


def harness_run(suite: str, out: Path, reuse: bool, *args: str) -> dict:
    """One ``harness run``; its report."""
    env = {**os.environ, "HARNESS_REUSE": "1" if reuse else "0"}
    command = [sys.executable, "-m", "harness", "run", suite, "--out", str(out), *args]
    print("$", " ".join(command[1:]), f"(HARNESS_REUSE={env['HARNESS_REUSE']})", flush=True)
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{suite} failed (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return load(out)


def figures(report: dict) -> dict:
    vllm = [r for r in started(report["records"]) if r["kind"] == "vllm"]
    return {
        "vllm": len(vllm),
        "configurations": len({r["fingerprint"] for r in vllm}),
        "reused": report["starts"]["total"].get("reused", 0),
        "saved_s": report["starts"]["total"].get("saved_s", 0.0),
        "wall_s": sum(p["wall_s"] for p in report["phases"]),
        "tests": sum(t["outcome"] == "passed" for t in report["tests"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="where the four run directories go (default: a temporary directory)")
    parser.add_argument(
        "--runs",
        type=lambda text: text.split(","),
        default=list(RUNS),
        help="which runs to run now, comma-separated (default: all four)",
    )
    options = parser.parse_args()
    unknown = set(options.runs) - set(RUNS)
    if unknown:
        parser.error(f"unknown runs {', '.join(sorted(unknown))}; the runs are {', '.join(RUNS)}")
    out = Path(options.out or tempfile.mkdtemp(prefix="reuse-benchmark-"))
    runs = {}
    for key, (name, suite, reuse, *args) in RUNS.items():
        if key in options.runs:
            runs[name] = harness_run(suite, out / key, reuse, *(a.format(out=out) for a in args))
        elif (out / key / "report.json").is_file():
            runs[name] = load(out / key)
    shown = {name: figures(report) for name, report in runs.items()}
    print(f"\nrun directories: {out}")
    if len(shown) < len(RUNS):
        print(
            "runs so far:",
            ", ".join(f"{name}: {f['vllm']} starts, {f['wall_s']:.1f} s" for name, f in shown.items()),
        )
        return
    shipped = shown["pooling (shipped)"]["wall_s"]
    distinct = shown["naive, reuse off"]["configurations"]
    header = (
        ("vLLM starts", 12),
        ("reused", 8),
        ("saved s", 9),
        ("wall s", 9),
        ("× shipped", 11),
        ("passed", 8),
    )
    print(f"{'run':<28}" + "".join(f"{name:>{width}}" for name, width in header))
    for name, f in shown.items():
        print(
            f"{name:<28}{f['vllm']:>12}{f['reused']:>8}{f['saved_s']:>9.1f}{f['wall_s']:>9.1f}"
            f"{f['wall_s'] / shipped:>11.2f}{f['tests']:>8}"
        )
    best = shown["naive, reuse on + history"]
    ratio = best["wall_s"] / shipped
    print(f"reuse: starts {best['vllm']} of {distinct} distinct, wall {ratio:.2f}× the shipped suite")


if __name__ == "__main__":
    main()
