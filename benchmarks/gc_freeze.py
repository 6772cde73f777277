"""Backs docs/measurements.md § Garbage-collection freeze: prints what freezing the collection saves a suite
that cleans up after every test, with vLLM's own cleanup in the loop (its conftest's autouse
``cleanup_fixture`` runs ``cleanup_dist_env_and_memory()``, which unfreezes and collects) or with a plain
``gc.collect()`` (a conftest that collects without unfreezing).

    python benchmarks/gc_freeze.py [--tests 200] [--rounds 3] [--imports torch,transformers,vllm]
                                   [--cleanup vllm|collect]

The suite's conftest imports ``--imports`` (what vLLM's test modules import while collected; modules that
are not installed are skipped) and runs the cleanup after every test; its tests are empty. Each round
runs plain pytest, the harness with ``freeze_collected`` off and the harness as installed (on), each in a
fresh process. Printed: the objects the collector tracked after the imports, each side's median wall, and
what the freeze saves a test.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from trivial import FILE, environment, timed

CONFTEST = """
import gc
import importlib

import pytest

for name in {imports!r}:
    try:
        importlib.import_module(name)
    except Exception:  # not installed here, or broken: the suite measures what did import
        pass
print(f"TRACKED={{len(gc.get_objects())}}")


@pytest.fixture(autouse=True)
def cleanup():
    yield
    {cleanup}
"""
CLEANUPS = {
    "vllm": "importlib.import_module('vllm.distributed.parallel_state').cleanup_dist_env_and_memory()",
    "collect": "gc.collect()",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--imports", default="torch,transformers,vllm")
    parser.add_argument("--cleanup", choices=CLEANUPS, default="vllm", help="after each test (see above)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory) / "suite"
        root.mkdir()
        (root / "conftest.py").write_text(
            CONFTEST.format(imports=options.imports.split(","), cleanup=CLEANUPS[options.cleanup])
        )
        (root / FILE).write_text("".join(f"def test_{n}():\n    pass\n\n\n" for n in range(options.tests)))
        (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
        print(f"objects tracked after importing {options.imports}: {tracked(root)}")
        env = environment()
        sides = {
            "plain": (["-p", "no:harness"], env),
            "harness, freeze_collected off": (["--harness"], {**env, "HARNESS_FREEZE_COLLECTED": "0"}),
            "harness": (["--harness"], env),
        }
        walls: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(options.rounds):
            for name, (args, side_env) in sides.items():
                walls[name].append(timed(args, root, side_env)[0])
    medians = {name: statistics.median(seconds) for name, seconds in walls.items()}
    for name, seconds in medians.items():
        print(f"{name}: {seconds:.2f} s (median of {options.rounds})")
    saved = medians["harness, freeze_collected off"] - medians["harness"]
    print(
        f"freezing the collection saves {saved / options.tests * 1e3:.1f} ms a test ({options.tests} tests)"
    )


def tracked(root: Path) -> str:
    """The objects the collector tracks once the conftest's imports are done, from a collect-only run."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-s", "-p", "no:harness"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return next(
        line.removeprefix("TRACKED=") for line in done.stdout.splitlines() if line.startswith("TRACKED=")
    )


if __name__ == "__main__":
    main()
