"""Backs docs/validation.md § A forked engine after CUDA init (issue 60 item 1): the shape of
benchmarks/gpu/cuda_fork/ (an HF model on the CPU and ``torch.cuda.is_available()`` in the test process,
then a vLLM engine) in fresh pytest processes, with and without the harness; prints per arm the engine
test's outcome, failure class and seconds, the ``cuda-fork`` findings and the engine start's seconds.

    python3 benchmarks/gpu/cuda_fork.py --work DIR [--arms plain,fork,harness,baseline]

Arms: ``plain`` plain pytest (``-p no:harness``), vLLM left to choose; ``fork`` the harness with
``VLLM_WORKER_MULTIPROC_METHOD=fork`` (the suite's own choice, kept: the failure is named); ``harness`` the
harness, vLLM left to choose (the harness sets spawn); ``baseline`` the harness, the engine test alone (no
CUDA in the test process: vLLM forks), the start a spawned engine is compared with.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = Path(__file__).resolve().parent / "cuda_fork" / "test_fork_after_cuda.py"
sys.path.insert(0, str(ROOT))

from harness import ledger  # noqa: E402

METHOD = "VLLM_WORKER_MULTIPROC_METHOD"


def model(work: Path) -> str:
    from tests.models.conftest import minilm_path
    from tests.models.generation.conftest import build

    where = work / "model"
    if not (where / "config.json").exists():
        build("llama", minilm_path(), where)
    return str(where)


def arm(work: Path, name: str, budget_s: float) -> None:
    here = work / name
    shutil.rmtree(here, ignore_errors=True)
    here.mkdir(parents=True)
    shutil.copy(SUITE, here / SUITE.name)
    (here / "pyproject.toml").write_text("[tool.harness]\n")
    env = {**os.environ, "FORK_MODEL": model(work), "HARNESS_PLATFORM": "cuda"}
    env.pop(METHOD, None)
    args = [sys.executable, "-m", "pytest", SUITE.name, "-p", "no:cacheprovider", "-v", "-s", "--durations=0"]
    if name == "plain":
        args += ["-p", "no:harness", "-p", "no:harness_workers"]
    else:
        args += ["--harness-ledger-dir", str(here / "ledger")]
    if name == "fork":
        env[METHOD] = "fork"
    if name == "baseline":
        args += ["-k", "engine"]
    began = time.monotonic()
    with open(here / "pytest.log", "w") as log:
        try:
            subprocess.run(args, cwd=here, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=budget_s)
        except subprocess.TimeoutExpired:
            print(f"{name}: stopped after {budget_s:.0f} s", file=log)
    (here / "wall_s").write_text(f"{time.monotonic() - began:.1f}\n")


def summary(work: Path, name: str) -> None:
    here = work / name
    log = (here / "pytest.log").read_text(errors="replace")
    lines = [line for line in log.splitlines() if "driver initialized" in line or "test_engine " in line]
    lines += [line for line in log.splitlines() if "CUDA error" in line or "initialization failed" in line][
        :3
    ]
    wall = (here / "wall_s").read_text().strip()
    print(f"\n== {name}: wall {wall} s")
    for line in lines:
        print(f"  log: {line.strip()[:300]}")
    if not (here / "ledger").exists():
        return
    found = ledger.read(here / "ledger")
    for test in found.tests:
        if test["nodeid"].endswith("test_engine"):
            print(f"  test_engine: {test['outcome']}, class {test.get('failure_class')}")
    for record in found.records:
        print(f"  vLLM start: {record.get('outcome')} in {record.get('startup_s')} s")
    for finding in found.findings:
        if finding["type"] == "cuda-fork":
            print(f"  finding cuda-fork ({finding.get('test')}): {finding['message']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--arms", default="plain,fork,harness,baseline")
    parser.add_argument("--budget-s", type=float, default=150, help="each arm's limit")
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    for name in args.arms.split(","):
        arm(work, name, args.budget_s)
        summary(work, name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
