"""Backs docs/measurements.md § Reuse through vLLM's own conftest: plain pytest, harness without and with
reuse, and the hand-fixed file, on vLLM's own conftest, unedited; prints starts, outcomes and walls.

    python benchmarks/vllm_tree.py --work DIR [--cache DIR | --sdist FILE] [--kv-cache-gib N] [--platform P]
    python benchmarks/vllm_tree.py --fetch-only --cache DIR [--version V]   (stage the sdist for the GPU)

vLLM 0.32.0's tests (the sdist, as ``vllm_upstream.py`` fetches it; ``--version`` picks another, e.g. 0.26.0
on the H200) with its own ``tests/conftest.py``. Its ``test_truncation_control.py`` is already hand-fixed
(one module-scoped engine); the naive variant written beside it is what PR #52570 removed file by file:
two of its tests, each opening its own ``with vllm_runner(...)``, over two ``max_model_len`` values
interleaved by ``parametrize`` (pytest runs them 128, 96, 128, 96, ...). The hand-fixed variant keeps one
module-scoped engine per value (a parametrized module fixture). Runs, one after another:

- ``plain pytest``: ``python -m pytest`` on the naive file, the harness plugin only observing (its ledger
  counts the starts; without reuse it changes nothing);
- ``harness, reuse off`` and ``harness, reuse on`` (``HARNESS_REUSE=1``, no history: a first run);
- ``hand-fixed``: ``harness run`` on the hand-fixed file, reuse off.

``--runs on,fixed`` runs some of them (``plain``, ``off``, ``on``, ``fixed``) and reads the others from an
earlier call's ``--work/vllm-tree-results.json``, so a short device call can take a part. A run named twice
runs twice (``on,fixed,fixed,on`` alternates them, so neither always follows the other): its wall is the
median of its runs and the ratio against the hand-fixed file is printed with its range. Printed, once all
four are there: outcomes per run and whether each test's outcome equals plain pytest's, vLLM starts against
distinct configurations per worker, ``harness compare`` of reuse off → on, and the wall with reuse against
the hand-fixed file's (the goal: at most 1.1×). Exit 1 when outcomes differ or starts exceed configurations.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vllm_upstream  # noqa: E402

from harness import ledger  # noqa: E402

DIRECTORY = "tests/models/language/pooling"
NAIVE = f"{DIRECTORY}/test_truncation_naive.py"
FIXED = f"{DIRECTORY}/test_truncation_fixed.py"
TABLE = f"""
# added for harness: the naive and the hand-fixed truncation files
[tool.harness.suites.naive]
paths = ["{NAIVE}"]

[tool.harness.suites.fixed]
paths = ["{FIXED}"]
"""
LENGTHS = (128, 96)
RUNS = {
    "plain": "plain pytest",
    "off": "harness, reuse off",
    "on": "harness, reuse on",
    "fixed": "hand-fixed",
}

# two of the three tests of vLLM's test_truncation_control.py (kept few: a start is ~30 s on 2 cores), over
# two max_model_len values; {engine} opens or receives the engine, {length} is its max_model_len
TESTS = """

def test_smaller_truncation_size({signature}):
{engine}        output = vllm_model.llm.embed(
            input_str, tokenization_kwargs=dict(truncate_prompt_tokens=10)
        )
        assert len(output[0].prompt_token_ids) == 10


def test_max_truncation_size({signature}):
{engine}        output = vllm_model.llm.embed(
            input_str, tokenization_kwargs=dict(truncate_prompt_tokens=-1)
        )
        assert len(output[0].prompt_token_ids) == {length}

"""


def write_files(tree: Path) -> None:
    """The naive and the hand-fixed variant of vLLM's test_truncation_control.py, from its own header."""
    source = (tree / DIRECTORY / "test_truncation_control.py").read_text()
    header = re.split(r"\n(?=@pytest|def test_)", source, maxsplit=1)[0]  # imports, MODEL_NAME, input_str
    lengths = ", ".join(map(str, LENGTHS))
    naive = TESTS.format(
        signature="vllm_runner, max_model_len",
        engine='    with vllm_runner(\n        MODEL_NAME, runner="pooling", max_model_len=max_model_len\n'
        "    ) as vllm_model:\n",
        length="max_model_len",
    ).replace("\ndef test_", f'\n@pytest.mark.parametrize("max_model_len", [{lengths}])\ndef test_')
    fixed = re.sub(  # the body one level out: no ``with`` around it
        r"(?m)^    (    )",
        r"\1",
        TESTS.format(
            signature="vllm_model", engine="", length="vllm_model.llm.llm_engine.model_config.max_model_len"
        ),
    )
    fixture = (
        f'\n@pytest.fixture(scope="module", params=[{lengths}])\ndef vllm_model(vllm_runner, request):\n'
        '    with vllm_runner(\n        MODEL_NAME, runner="pooling", max_model_len=request.param\n'
        "    ) as model:\n        yield model\n"
    )
    (tree / NAIVE).write_text(header + naive)
    (tree / FIXED).write_text(header + fixture + fixed)
    with open(tree / "pyproject.toml", "a") as pyproject:
        pyproject.write(TABLE)


def figures(directory: Path) -> dict:
    """Outcomes per test, vLLM starts and distinct configurations per worker, reuses."""
    merged = ledger.read(directory)
    starts: Counter = Counter()
    configurations: dict[str, set] = {}
    for record in ledger.started(merged.records):
        if record["kind"] == "vllm":
            starts[record["worker"]] += 1
            configurations.setdefault(record["worker"], set()).add(record["fingerprint"])
    for reuse in merged.reuses:
        configurations.setdefault(reuse["worker"], set()).add(reuse["fingerprint"])
    return {
        "outcomes": {test["nodeid"]: test["outcome"] for test in merged.tests},
        "starts": dict(starts),
        "configurations": {worker: len(keys) for worker, keys in configurations.items()},
        "reused": len(merged.reuses),
        "refused": [r["reason"] for r in merged.refusals],
        "handoff_s": [r["handoff_s"] for r in merged.reuses if r.get("handoff_s") is not None],
        "startup_s": [r["startup_s"] for r in ledger.started(merged.records) if r.get("startup_s")],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="where the tree, hub cache and runs go")
    parser.add_argument("--cache", type=Path, help="where the sdist is kept (default: --work)")
    parser.add_argument("--sdist", type=Path, help="a vLLM sdist already here (no network: the GPU machine)")
    parser.add_argument("--fetch-only", action="store_true", help="download the sdist into --cache and stop")
    parser.add_argument("--kv-cache-gib", type=int, default=1, help="VLLM_CPU_KVCACHE_SPACE; 0 unsets it")
    parser.add_argument("--platform", default="cpu", help="harness run --platform (default cpu)")
    parser.add_argument("--version", default=vllm_upstream.VERSION, help="the vLLM sdist whose tests run")
    parser.add_argument(
        "--runs",
        type=lambda text: text.split(","),
        default=list(RUNS),
        help=f"which runs to run now, comma-separated (default all: {','.join(RUNS)}); the others are read "
        "from an earlier call's --work",
    )
    args = parser.parse_args()
    if set(args.runs) - set(RUNS):
        parser.error(
            f"unknown runs {','.join(sorted(set(args.runs) - set(RUNS)))}; the runs: {','.join(RUNS)}"
        )
    vllm_upstream.VERSION, vllm_upstream.SDIST = args.version, f"vllm-{args.version}.tar.gz"
    if args.fetch_only or args.work is None:
        if args.cache is None:
            parser.error("--fetch-only needs --cache, a run needs --work")
        print(vllm_upstream.fetch(args.cache.resolve()))
        return 0
    work = args.work.resolve()
    tree = work / f"vllm-{args.version}"
    if not (tree / NAIVE).is_file():
        sdist = args.sdist.resolve() if args.sdist else vllm_upstream.fetch((args.cache or work).resolve())
        tree = vllm_upstream.extract(sdist, work)
        write_files(tree)
        vllm_upstream.hub_cache(work / "hf-home")
    env = {**os.environ, "HF_HOME": str(work / "hf-home"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    env.pop("HARNESS_REUSE", None)
    if args.kv_cache_gib:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(args.kv_cache_gib)
    harness = [sys.executable, "-m", "harness", "run", "--platform", args.platform]
    commands = {
        "plain": [sys.executable, "-m", "pytest", NAIVE, "--harness-ledger-dir=plain-ledger"],
        "off": [*harness, "naive", "--out", "out-off"],
        "on": [*harness, "naive", "--out", "out-on"],
        "fixed": [*harness, "fixed", "--out", "out-fixed"],
    }
    saved = work / "vllm-tree-results.json"
    results = json.loads(saved.read_text()) if saved.is_file() else {}
    for key in set(args.runs):
        results.pop(RUNS[key], None)  # this call's runs replace an earlier call's
    for key in args.runs:
        name, command, extra = RUNS[key], commands[key], {"HARNESS_REUSE": "1"} if key == "on" else {}
        directory = tree / command[-1].removeprefix("--harness-ledger-dir=")
        shutil.rmtree(directory, ignore_errors=True)
        print(f"\n=== {name}: {' '.join(command)} {extra or ''}", flush=True)
        wall, code = vllm_upstream.timed(command, tree, {**env, **extra})
        ledger_dir = directory if key == "plain" else directory / "ledger"
        walls = [*results.get(name, {}).get("walls", []), round(wall, 1)]
        median = statistics.median(walls)
        results[name] = {"wall_s": median, "walls": walls, "exit": code, **figures(ledger_dir)}
        if key != "plain":  # each harness run's report, kept apart when a run repeats
            (work / "reports").mkdir(exist_ok=True)
            shutil.copy(directory / "report.json", work / "reports" / f"{key}-{len(walls)}.json")
        saved.write_text(json.dumps(results, indent=1) + "\n")
    if set(results) != set(RUNS.values()):
        for name, result in results.items():
            print(
                f"{name}: vLLM starts {sum(result['starts'].values())}, wall {result['wall_s']:.1f} s, "
                f"outcomes {dict(Counter(result['outcomes'].values()))}, refused {result['refused']}"
            )
        return 0
    compare = subprocess.run(
        [sys.executable, "-m", "harness", "compare", "out-off", "out-on"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    return report(results, compare.stdout + compare.stderr, args.version)


def report(results: dict, compare: str, version: str) -> int:
    print(f"\n=== vLLM {version}'s own conftest, naive {NAIVE} ({len(LENGTHS)} configurations)")
    plain = results["plain pytest"]["outcomes"]
    ok = bool(plain)
    for name, result in results.items():
        counts = Counter(result["outcomes"].values())
        shown = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) or "no tests"
        starts = sum(result["starts"].values())
        distinct = sum(result["configurations"].values())
        print(
            f"{name:<20} {shown}; exit {result['exit']}; vLLM starts {starts} "
            f"(distinct configurations per worker {distinct}), reused {result['reused']}; "
            f"wall {result['wall_s']:.1f} s"
        )
        for reason in result["refused"]:
            print(f"  reuse-refused: {reason}")
        handoffs, startups = result.get("handoff_s"), result.get("startup_s")
        if handoffs and startups:
            print(
                f"  a hand-off's checks and reset: median {statistics.median(handoffs):.3f} s "
                f"({len(handoffs)}); a start: median {statistics.median(startups):.1f} s"
            )
        if name != "hand-fixed":
            differ = sorted(
                n
                for n in plain.keys() | result["outcomes"].keys()
                if plain.get(n) != result["outcomes"].get(n)
            )
            for nodeid in differ:
                other = result["outcomes"].get(nodeid)
                print(f"  differs from plain pytest: {nodeid}: {plain.get(nodeid)} vs {other}")
            ok = ok and not differ
    reuse = results["harness, reuse on"]
    at_distinct = all(reuse["starts"].get(w, 0) <= n for w, n in reuse["configurations"].items())
    ok = ok and at_distinct
    print(f"\n=== harness compare out-off out-on\n{compare.rstrip()}")
    fixed = results["hand-fixed"]
    ratio = reuse["wall_s"] / fixed["wall_s"]
    walls = reuse.get("walls", [reuse["wall_s"]]), fixed.get("walls", [fixed["wall_s"]])
    low, high = min(walls[0]) / max(walls[1]), max(walls[0]) / min(walls[1])
    print(
        f"\noutcomes {'equal plain pytest test by test' if ok else 'DIFFERENT'}; reuse: vLLM starts "
        f"{sum(reuse['starts'].values())}, distinct configurations {sum(reuse['configurations'].values())}, "
        f"at most one start each: {at_distinct}; wall with reuse {ratio:.2f}× the hand-fixed file's "
        f"(medians of {len(walls[0])} and {len(walls[1])} runs; range {low:.2f}–{high:.2f}; goal ≤ 1.1×)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
