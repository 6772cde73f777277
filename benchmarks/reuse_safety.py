"""Backs docs/measurements.md § Reuse that never changes an outcome: the naive tests of
tests/unit/vllm_reuse/safety_suite.py (state left in an engine, a killed engine core, an error inside the
``with`` block, a forked test, a test that fails only on a handed-on engine) with reuse off and on.

    python benchmarks/reuse_safety.py --work DIR [--platform cpu|cuda] [--runs off,on] [--suite threads]

``--runs on`` runs one of them and reads the other from an earlier call's DIR (a device call is short);
``-k EXPR`` runs a part of the suite (``-k EXPR --part N`` keeps it apart from the rest of its run).
``--suite threads`` runs tests/unit/vllm_reuse/threads_suite.py instead (tests that leave a thread or a
timer behind; safety_suite.py beside it as its runner).

Builds the suite's tiny generation model once under DIR, runs the suite with plain pytest and the harness
observing (reuse off), then with ``--harness-reuse``, each its own ledger. Prints each test's outcome in
both runs and whether they are equal, vLLM starts (the parent's and forked children's) against the
configurations, the refusals by reason, the safety net's findings and retries (tries run again, the starts
they made, the tests that passed only through one), and the median seconds of a hand-off's checks and
reset beside a start's. Exit 1 when an outcome differs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "tests" / "unit" / "vllm_reuse" / "safety_suite.py"
SUITES = {"safety": SUITE, "threads": SUITE.with_name("threads_suite.py")}
sys.path.insert(0, str(ROOT))

from harness import ledger  # noqa: E402


def model(work: Path) -> str:
    from tests.models.conftest import minilm_path
    from tests.models.generation.conftest import build

    where = work / "model"
    if not (where / "config.json").exists():
        build("llama", minilm_path(), where)
    return str(where)


def run(work: Path, name: str, reuse: bool, platform: str, select: str | None, suite: str) -> None:
    here = work / name
    shutil.rmtree(here, ignore_errors=True)
    here.mkdir(parents=True)
    shutil.copy(SUITE, here / "safety_suite.py")  # the runner the other suites import; not collected
    shutil.copy(SUITES[suite], here / f"test_{suite}.py")
    (here / "pyproject.toml").write_text("[tool.harness]\n")
    env = {**os.environ, "SAFETY_MODEL": model(work), "HARNESS_PLATFORM": platform}
    args = [sys.executable, "-m", "pytest", f"test_{suite}.py", "-p", "no:cacheprovider", "-v"]
    args += ["--harness-ledger-dir", str(here / "ledger"), *(["--harness-reuse"] if reuse else [])]
    args += ["-k", select] if select else []
    began = time.monotonic()
    with open(here / "pytest.log", "w") as log:
        subprocess.run(args, cwd=here, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    (here / "wall_s").write_text(f"{time.monotonic() - began:.1f}\n")


def read(work: Path, name: str) -> tuple[ledger.Ledger, float]:
    """Run ``name``'s ledger and wall, its parts (``--part``) merged."""
    merged, wall = ledger.Ledger(), 0.0
    for here in sorted(p.parent for p in work.glob(f"{name}*/wall_s")):
        found = ledger.read(here / "ledger")
        for field in ("records", "tests", "findings", "reuses", "refusals", "reruns"):
            getattr(merged, field).extend(getattr(found, field))
        wall += float((here / "wall_s").read_text())
    return merged, wall


def report(runs: dict[str, tuple[ledger.Ledger, float]]) -> int:
    outcomes = {name: {t["nodeid"]: t["outcome"] for t in found.tests} for name, (found, _) in runs.items()}
    names = list(runs)
    tests = list(dict.fromkeys(t for found in outcomes.values() for t in found))
    differ = 0
    print(f"{'test':58} " + " ".join(f"{n:>8}" for n in names))
    for test in tests:
        row = [outcomes[n].get(test, "-") for n in names]
        differ += len(set(row)) > 1
        print(
            f"{test.split('::')[-1]:58} "
            + " ".join(f"{o:>8}" for o in row)
            + ("  DIFFERS" if len(set(row)) > 1 else "")
        )
    for name, (found, wall) in runs.items():
        vllm = [r for r in found.records if r["kind"] == "vllm"]
        forked = [r for r in vllm if "." in str(r.get("worker") or "") or "." in str(r["id"]).split("-")[0]]
        configurations = {r["fingerprint"] for r in vllm}
        print(
            f"\n{name}: {wall:.0f} s, vLLM starts {len(vllm)} ({len(forked)} in forked children), "
            f"{len(configurations)} configurations, {len(found.reuses)} handed on"
        )
        for reason, count in ledger.refused_because(found.refusals):
            print(f"  refused {count}x: {reason}")
        for finding in found.findings:
            if finding["type"] in ("reuse-sensitive", "own-failure"):
                print(f"  safety net: {finding['message']}")
        retried = {r["test"]: r["result"] for r in found.reruns}
        rescued = sum(result == "passed" for result in retried.values())
        print(
            f"  retries: {len(found.reruns)} tries of {len(retried)} tests run again, starting "
            f"{sum(r['starts'] for r in found.reruns)}; {rescued} passed only through a retry"
        )
        starts = [r["startup_s"] for r in vllm if r.get("startup_s")]
        handoffs = [r["handoff_s"] for r in found.reuses if r.get("handoff_s") is not None]
        if starts and handoffs:
            print(
                f"  a start: median {statistics.median(starts):.2f} s; a hand-off's checks and reset: median "
                f"{statistics.median(handoffs):.3f} s (max {max(handoffs):.3f} s, {len(handoffs)} hand-offs)"
            )
    print(f"\noutcomes differing between runs: {differ}")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--platform", default="cpu")
    parser.add_argument("--runs", default="off,on")
    parser.add_argument("-k", dest="select", help="pytest's -k: a part of the suite")
    parser.add_argument("--part", default="", help="a suffix of the run's folder, for a part")
    parser.add_argument("--suite", choices=SUITES, default="safety", help="which suite (default: safety)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    for name in args.runs.split(","):
        run(args.work, name + args.part, name == "on", args.platform, args.select, args.suite)
    done = [name for name in ("off", "on") if any(args.work.glob(f"{name}*/wall_s"))]
    return report({name: read(args.work, name) for name in done})


if __name__ == "__main__":
    sys.exit(main())
