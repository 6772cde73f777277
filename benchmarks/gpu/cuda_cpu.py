"""Where the cuda platform's extra CPU goes: the CPU and wall seconds of 2000 trivial tests, plain and with
the harness as the cpu platform, the cuda platform, cuda without the memory sampler and cuda without the
recorder, the variants in turn each round (the order rotating), medians. Run it pinned to one core
(``taskset -c 5``), where every thread's CPU is the process's and a second core hides nothing.

    taskset -c 5 python3 benchmarks/gpu/cuda_cpu.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/trivial.py
from trivial import environment, suite, timed  # noqa: E402

VARIANTS = {  # name: (pytest arguments, environment)
    "plain": (["-p", "no:harness"], {}),
    "cpu": (["--harness"], {"HARNESS_PLATFORM": "cpu"}),
    "cuda": (["--harness"], {"HARNESS_PLATFORM": "cuda"}),
    "cuda, no sampler": (["--harness"], {"HARNESS_PLATFORM": "cuda", "HARNESS_MEMORY_SAMPLE_S": "0"}),
    "cuda, no recorder": (["--harness", "-p", "no:harness-recorder"], {"HARNESS_PLATFORM": "cuda"}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as directory:
        root, env = suite(Path(directory), 2000), environment()
        measured: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
        names = list(VARIANTS)
        for round_ in range(rounds + 1):  # round 0 warms caches and bytecode and is not counted
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                args, extra = VARIANTS[name]
                ledger = [f"--harness-ledger-dir={directory}/ledger-{round_}-{len(measured[name])}"]
                done = timed(args + ledger if name != "plain" else args, root, {**env, **extra})
                if round_:
                    measured[name].append(done)
    for name, runs in measured.items():
        wall, cpu = (statistics.median(run[i] for run in runs) for i in (0, 1))
        print(f"{name:18} wall {wall:.3f} s, CPU {cpu:.3f} s (medians of {rounds})")


if __name__ == "__main__":
    main()
