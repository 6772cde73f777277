"""Backs docs/selection.md § Replay on vLLM's tree: selection on vLLM's own pooling tests (0.32.0, as
``benchmarks/vllm_upstream.py`` sets them up) on the CPU build, for real edits to vLLM modules.

    python benchmarks/vllm_selection_replay.py --work DIR [--sdist FILE] [--keyword EXPR] [--edit NAME...]
    python benchmarks/vllm_selection_replay.py --work DIR --table    # the rows so far, no run

The slice: vllm_upstream.py's (``tests/models/language/pooling -k KEYWORD``: five tests, each starting a
CPU engine serving MiniLM) and five of vLLM's unit test files of the request parameters and outputs,
which start no engine (``UNIT``, less two tests that need models not available offline), as a suite
``replay`` added to the tree's pyproject.toml. They run once unedited with footprints
(``HARNESS_FOOTPRINTS=1``; the packages they record include ``vllm``, so the engine processes' files
count). Then, per edit: a copy of the installed ``vllm`` package (hard links: the installed one is never
written) with that one file rewritten (a new file, not the linked one) goes first on ``PYTHONPATH``; the
selection is this checkout's (``harness.select.choose``, as ``harness run --changed-since`` calls it)
from the unedited run's footprints, markers, engine groups and failures, for the edited file as the
change; and every test runs with the edit, as in shadow mode. A false green is a test that failed or
errored with the edit that selection would have skipped. Prints per edit: selected / total, false
greens, the tests that failed with it; then the distribution. Each edit's failures are kept in
``DIR/rows.jsonl`` and its selection computed from the unedited run when printed (``--table``: the rows
so far); an edit whose row is there is not run again.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import vllm_upstream  # benchmarks/: the tree, the hub cache and the sdist as it sets them up
from selection_replay import spread  # benchmarks/: the replays' one summary of shares

from harness.report import previous, store
from harness.select import rules, table
from harness.select.choose import choose


class Edit(NamedTuple):
    name: str
    path: str  # in the vllm package, as footprints name it
    old: str  # found exactly once
    new: str
    what: str


POOLER = "vllm/model_executor/layers/pooler/seqwise/methods.py"
EDITS = (
    Edit(
        "pooler-mean-flipped",
        POOLER,
        "return segment_sums / prompt_lens.unsqueeze(1)",
        "return (segment_sums / prompt_lens.unsqueeze(1)).flip(-1)",
        "breaks: mean pooling's vector reversed (engine worker)",
    ),
    Edit(
        "embed-order",
        "vllm/entrypoints/pooling/offline.py",
        "return [EmbeddingRequestOutput.from_base(item) for item in items]",
        "return [EmbeddingRequestOutput.from_base(item) for item in items][::-1]",
        "breaks: LLM.embed returns its outputs reversed (test process)",
    ),
    Edit(
        "truncation-limit",
        "vllm/renderers/params.py",
        "and truncate_prompt_tokens > max_input_tokens\n",
        "and truncate_prompt_tokens > max_input_tokens + 1\n",
        "breaks: a truncation one past the model's limit is accepted (tokenizer path, test process)",
    ),
    Edit(
        "embed-entrypoint",
        "vllm/entrypoints/pooling/offline.py",
        "return [EmbeddingRequestOutput.from_base(item) for item in items]",
        "return list(map(EmbeddingRequestOutput.from_base, items))",
        "neutral: the embedding entrypoint's list built by map",
    ),
    Edit(
        "tokenizer-cache",
        "vllm/tokenizers/hf.py",
        "tokenizer_len = len(tokenizer)",
        "tokenizer_len = int(len(tokenizer))",
        "neutral: the cached tokenizer's length",
    ),
    Edit(
        "engine-core",
        "vllm/v1/engine/core.py",
        '"[shutdown] EngineCore: exiting busy loop"',
        '"[shutdown] EngineCore: leaving the busy loop"',
        "neutral: a log line of the EngineCore's shutdown (engine process)",
    ),
    Edit(
        "bert-model",
        "vllm/model_executor/models/bert.py",
        "self.size = config.hidden_size",
        "self.size = int(config.hidden_size)",
        "neutral: the model the tests serve (engine worker)",
    ),
    Edit(
        "runner-v2-pooling",
        "vllm/v1/worker/gpu/pool/pooling_runner.py",
        "selected_task = self.model_config.get_pooling_task(model_tasks)",
        "selected_task = self.model_config.get_pooling_task(tuple(model_tasks))",
        "neutral: Model Runner V2's pooling runner (one test uses it)",
    ),
    Edit(
        "sampler",
        "vllm/v1/sample/sampler.py",
        "num_logprobs = sampling_metadata.max_num_logprobs",
        "num_logprobs = sampling_metadata.max_num_logprobs or None",
        "neutral: generation-only (the sampler; pooling never samples)",
    ),
    Edit(
        "outputs-finished",
        "vllm/outputs.py",
        "self.finished |= next_output.finished",
        "self.finished = next_output.finished",
        "breaks: a merged RequestOutput forgets it had finished (unit tests' code, test process)",
    ),
    Edit(
        "sampling-params",
        "vllm/sampling_params.py",
        '"""Validate that some fields are mutually exclusive."""',
        '"""Check that the structured output fields are mutually exclusive."""',
        "neutral: generation-only (SamplingParams), a docstring",
    ),
    Edit(
        "llama-model",
        "vllm/model_executor/models/llama.py",
        'prefix=f"{prefix}.gate_up_proj",',
        'prefix=prefix + ".gate_up_proj",',
        "neutral: a model the pooling tests never load",
    ),
)
FAILED = ("failed", "error")
UNIT = ("test_pooling_params", "test_sampling_params", "test_outputs", "test_logprobs", "test_sequence")
KEYWORD = (
    f"({vllm_upstream.KEYWORD} or {' or '.join(f'{name}.py' for name in UNIT)}) "
    "and not test_embed_dimensions"  # both need BAAI/bge models, which are not offline here
)
SUITE = f"""
# added by benchmarks/vllm_selection_replay.py
[tool.harness.suites.replay]
paths = {json.dumps([vllm_upstream.SUITE, *(f"tests/{name}.py" for name in UNIT)])}
"""


def installed() -> Path:
    """The installed vllm package's folder (found without importing it)."""
    from importlib.util import find_spec

    spec = find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("vllm is not installed here: run with the CPU stack's python")
    return Path(next(iter(spec.submodule_search_locations)))


def overlay(work: Path, edit: Edit) -> Path:
    """``DIR/overlay/<edit>/vllm``: hard links to the installed package's files, the edited one a new file
    (its cached byte code dropped); returns the folder for ``PYTHONPATH``."""
    top = work / "overlay" / edit.name
    shutil.rmtree(top, ignore_errors=True)
    top.mkdir(parents=True)
    source = installed()
    subprocess.run(["cp", "-al", str(source), str(top / "vllm")], check=True)
    target = top / edit.path
    text = target.read_text()
    if text.count(edit.old) != 1:
        raise SystemExit(f"{edit.name}: {edit.path} holds its text {text.count(edit.old)} times, not once")
    target.unlink()  # a hard link: writing it would edit the installed package
    target.write_text(text.replace(edit.old, edit.new))
    for cached in (target.parent / "__pycache__").glob(f"{target.stem}.*.pyc"):
        cached.unlink()
    return top


def run(tree: Path, out: str, keyword: str, env: dict) -> dict:
    """``harness run replay --platform cpu -- -k KEYWORD`` in the tree; its report."""
    command = [sys.executable, "-m", "harness", "run", "replay", "--platform", "cpu", "--out", out]
    command += ["--", "-k", keyword]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    print(f"  {out}: exit {done.returncode}, {time.perf_counter() - started:.0f} s", flush=True)
    if not (tree / out / "report.json").is_file():
        raise SystemExit(f"{out}: no report.json\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return json.loads((tree / out / "report.json").read_text())


def selection(tree: Path, base: Path, edit: Edit, tests: list[str]) -> tuple[dict, str | None]:
    """The tests this checkout's selection runs for the edited file, from the unedited run (as
    ``harness run --changed-since`` reads its history); why every test runs, if it does."""
    history = previous.from_report(store.load(base), str(base))
    decoded = table.decode(dict(history.report or {}).get("footprints"))
    prior = decoded if isinstance(decoded, str) else decoded[0]
    markers = {} if isinstance(decoded, str) else decoded[1]
    given = rules.load(None)
    made = choose(tests, prior, markers, [edit.path], given, history.groups.unit, "", None, history.failed)
    return made.selected, made.everything


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True, type=Path, help="the tree, hub cache, runs and rows")
    parser.add_argument("--sdist", type=Path, help="vllm's sdist, already here (default: downloaded once)")
    parser.add_argument("--keyword", default=KEYWORD, help="-k of every run")
    parser.add_argument("--edit", action="append", help="only these edits (default: all)")
    parser.add_argument("--table", action="store_true", help="print the kept rows, run nothing")
    args = parser.parse_args()
    work = args.work.resolve()
    rows_path = work / "rows.jsonl"
    tree = work / f"vllm-{vllm_upstream.VERSION}"
    base = tree / "replay-base" / "report.json"
    if args.table:
        return summary(tree, base, _rows(rows_path))
    if not (tree / "pyproject.toml").is_file():
        sdist = args.sdist.resolve() if args.sdist else vllm_upstream.fetch(work)
        vllm_upstream.extract(sdist, work)
        vllm_upstream.hub_cache(work / "hf-home")
    pyproject = tree / "pyproject.toml"
    if "suites.replay]" not in pyproject.read_text():
        with open(pyproject, "a") as out:
            out.write(SUITE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS_", "PYTHONPATH"))}
    env.update(
        HF_HOME=str(work / "hf-home"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_CPU_OMP_THREADS_BIND="nobind",
        HARNESS_REUSE="0",
        PYTHONDONTWRITEBYTECODE="1",  # nothing written into the linked package's __pycache__
    )
    if not base.is_file():
        print("=== unedited, with footprints", flush=True)
        run(tree, "replay-base", args.keyword, {**env, "HARNESS_FOOTPRINTS": "1"})
    known = {row["edit"] for row in _rows(rows_path)}
    for edit in EDITS:
        if (args.edit and edit.name not in args.edit) or edit.name in known:
            continue
        print(f"=== {edit.name}: {edit.path} ({edit.what})", flush=True)
        folder = overlay(work, edit)
        ran = run(tree, f"replay-{edit.name}", args.keyword, {**env, "PYTHONPATH": str(folder)})
        shutil.rmtree(folder)
        failed = sorted(t["nodeid"] for t in ran["tests"] if t.get("outcome") in FAILED)
        row = {"edit": edit.name, "path": edit.path, "what": edit.what, "failed": failed}
        with open(rows_path, "a") as rows:
            rows.write(json.dumps(row) + "\n")
    return summary(tree, base, _rows(rows_path))


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []


def scored(tree: Path, base: Path, row: dict) -> dict:
    """A row with the selection for its edit, from the unedited run (``selection``), and its false greens:
    the tests that failed with the edit that selection skips."""
    tests = [t["nodeid"] for t in json.loads(base.read_text())["tests"]]
    selected, everything = selection(tree, base, Edit(row["edit"], row["path"], "", "", ""), tests)
    missed = sorted(set(row["failed"]) - set(selected))
    return {
        **row,
        "selected": sorted(selected),
        "total": len(tests),
        "everything": everything,
        "missed": missed,
    }


def _line(row: dict) -> str:
    why = f"; every test: {row['everything']}" if row["everything"] else ""
    return (
        f"{row['edit']:<20} {len(row['selected'])}/{row['total']} selected "
        f"({len(row['selected']) / row['total']:.0%}), failed with it {len(row['failed'])}, "
        f"false greens {len(row['missed'])}{why}"
    )


def summary(tree: Path, base: Path, found: list[dict]) -> int:
    """Each row, then the median share selected with its quartiles, and the false greens."""
    found = [scored(tree, base, row) for row in found]
    for row in found:
        print(_line(row))
        for nodeid in row["failed"]:
            print(f"  failed with it: {nodeid}{'  FALSE GREEN' if nodeid in row['missed'] else ''}")
    if not found:
        print("no rows yet")
        return 0
    shares = sorted(len(r["selected"]) / r["total"] for r in found)
    greens = sum(len(r["missed"]) for r in found)
    listed = ", ".join(f"{share:.0%}" for share in shares)
    print(f"{len(found)} edits: {spread(shares)}; shares {listed}; false greens {greens}")
    return 1 if greens else 0


if __name__ == "__main__":
    sys.exit(main())
