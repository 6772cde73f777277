"""Backs docs/ci.md § Compile cache: engines start warm (and docs/validation.md on CUDA): one compiled vLLM
start, cold then warm, with the kept compile cache a CI build restores.

    python benchmarks/warm_starts.py --work DIR [--platform cpu|cuda] [--pairs 1]

Builds the tiny seeded llama of tests/models/generation/conftest.py under DIR, writes a one-test suite
(``VllmRunner(MODEL, dtype="float32", enforce_eager=False)``: torch.compile, and CUDA graphs on a GPU) and
runs ``harness run warm`` twice per pair with one ``HARNESS_COMPILE_CACHE`` folder, emptied before each
pair, as a first build leaves it and a second restores it. Prints each run's ``compile`` (the harness's
cold/warm reading), its start's seconds and its test outcome, and the warm/cold ratio per pair.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.report import store  # noqa: E402

TEST = """import os

from harness.runners import VllmRunner

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def test_compiled_engine_answers():
    with VllmRunner(os.environ["WARM_MODEL"], dtype="float32", max_model_len=256, enforce_eager=False) as r:
        assert r.llm.generate(["warm"], use_tqdm=False)[0].outputs[0].token_ids
"""


def suite(work: Path) -> tuple[Path, str]:
    from tests.models.conftest import minilm_path
    from tests.models.generation.conftest import build

    model = work / "model"
    if not (model / "config.json").exists():
        build("llama", minilm_path(), model)
    here = work / "suite"
    here.mkdir(parents=True, exist_ok=True)
    (here / "test_warm.py").write_text(TEST)
    suites = '[tool.harness.suites.warm]\npaths = ["test_warm.py"]\n'
    (here / "pyproject.toml").write_text(f"[tool.harness]\n\n{suites}")
    return here, str(model)


def run(here: Path, model: str, cache: Path, out: Path, platform: str) -> tuple[str, float, str]:
    """One ``harness run warm``: its start's compile reading and seconds, and the test's outcome."""
    env = {**os.environ, "WARM_MODEL": model, "HARNESS_COMPILE_CACHE": str(cache)}
    for name in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR"):
        env.pop(name, None)  # the kept folder decides where graphs go
    args = [sys.executable, "-m", "harness", "run", "warm", "--platform", platform, "--out", str(out)]
    with open(out.with_suffix(".log"), "w") as log:
        subprocess.run(args, cwd=here, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    report = store.load(out)
    [record] = [r for r in report["records"] if r.get("kind") == "vllm"] or [{}]
    outcome = ",".join(sorted({t.get("outcome", "?") for t in report["tests"]})) or "none"
    return str(record.get("compile")), float(record.get("startup_s") or float("nan")), outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="a folder for the model, suite and runs")
    parser.add_argument("--platform", default="cpu", help="harness run's --platform (default cpu)")
    parser.add_argument("--pairs", type=int, default=1, help="cold/warm pairs, each from an empty cache")
    args = parser.parse_args()
    here, model = suite(args.work.resolve())
    ratios = []
    print(f"{'run':10} {'compile':8} {'start s':>8} outcome")
    for pair in range(1, args.pairs + 1):
        cache = args.work.resolve() / "kept"
        shutil.rmtree(cache, ignore_errors=True)
        seconds = []
        for name in ("cold", "warm"):
            out = args.work.resolve() / f"pair{pair}-{name}"
            shutil.rmtree(out, ignore_errors=True)
            compiled, start, outcome = run(here, model, cache, out, args.platform)
            seconds.append(start)
            print(f"{out.name:10} {compiled:8} {start:8.1f} {outcome}", flush=True)
        ratios.append(seconds[1] / seconds[0])
    spread = f" (range {min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else ""
    print(f"warm/cold start: {statistics.median(ratios):.2f}x median of {len(ratios)}{spread}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
