"""Where the wall of 2000 trivial tests goes, plain pytest against the harness on each platform: the
median seconds of each stretch of a session, so a side that is slower shows in which stretch.

    python benchmarks/session_phases.py [--tests 2000] [--rounds 9] [--platforms cpu,cuda]
        [--variant 'NAME=PLATFORM [VARIABLE=VALUE...] ARG...'...]

A ``--variant`` is one more harness side with environment settings and pytest arguments of its own, e.g.
``'no-recorder=cuda -p no:harness-recorder'``: blocking one of the plugins the harness registers by name
(``harness-recorder``, ``harness-timeouts``) shows what it costs; ``'no-sampler=cuda
HARNESS_MEMORY_SAMPLE_S=0'`` switches a setting off. The platform ``plain`` runs without the harness, as
in ``'plain-nvml=plain HARNESS_PLATFORM=cuda -p nvml_only'`` (NVML's start alone, benchmarks/nvml_only.py).
Pinned to one core (``taskset -c 5``), a variant's user and system seconds are every thread's, and a
second core hides none of them.

Every run loads benchmarks/phase_clock.py (``-p phase_clock``), which notes when the interpreter reached
it, when pytest was configured, the tests collected, the first test started, the last one ended, the
session cleaned up and the process reached its last atexit handler; this script notes when it started the
process and when the process was gone. The variants run in turn within a round (the order rotating each
round), each in a fresh process with a fresh ledger. Printed: each variant's median seconds per stretch,
its median wall, user and system CPU seconds, the main thread's share of them (the rest is other threads',
as a BLAS pool's spinning) and minor page faults (memory the kernel had to hand it),
the garbage collector's seconds and full passes, and the threads the process had when configured and
when exiting (a native library's thread pool shows there).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from trivial import PYTEST, environment, ledger, median_interval, suite

STRETCHES = (  # (name, from mark, to mark)
    ("start", "spawned", "loaded"),
    ("configure", "loaded", "configured"),
    ("collect", "configured", "collected"),
    ("to-first", "collected", "first"),
    ("tests", "first", "last"),
    ("finish", "last", "cleaned"),
    ("atexit", "cleaned", "exiting"),
    ("exit", "exiting", "gone"),
)


def run(args: list[str], root: Path, env: dict, clock: Path) -> dict:
    """One session's marks (seconds since the epoch), its user and system CPU seconds, its minor page faults
    (memory the kernel had to hand it: dear on a virtual machine whose memory grows as it is used) and its
    threads."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    spawned = time.time()
    subprocess.run([*PYTEST, "-p", "phase_clock", *args], cwd=root, env=env, check=True, capture_output=True)
    gone = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = clock.read_text().splitlines()
    clock.unlink()
    noted = json.loads(lines[-1])
    return {
        "marks": {**noted["marks"], "spawned": spawned, "gone": gone},
        "wall": gone - spawned,
        "user": after.ru_utime - before.ru_utime,
        "system": after.ru_stime - before.ru_stime,
        "faults": after.ru_minflt - before.ru_minflt,
        "threads": noted["threads"],
        "main": noted["main_cpu"],
        "gc": noted["gc"]["seconds"],
        "full": noted["gc"]["collections"][2],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--platforms", default="cpu,cuda", help="HARNESS_PLATFORM of each harness variant")
    parser.add_argument(
        "--variant", action="append", default=[], help="NAME=PLATFORM [VAR=VALUE...] ARG...: another side"
    )
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        root = suite(Path(directory), options.tests)
        clock = Path(directory) / "clock.jsonl"
        env = {**environment(), "PHASE_CLOCK_FILE": str(clock)}
        env["PYTHONPATH"] = ":".join(filter(None, [str(Path(__file__).parent), env.get("PYTHONPATH")]))
        variants = {"plain": (["-p", "no:harness"], {})}
        for platform in options.platforms.split(","):
            variants[platform] = (["--harness"], {"HARNESS_PLATFORM": platform})
        for variant in options.variant:
            name, _, rest = variant.partition("=")
            platform, *words = rest.split()
            settings = [word for word in words if word[:1].isupper() and "=" in word]  # VARIABLE=VALUE
            args = [word for word in words if word not in settings]
            environ = dict(setting.split("=", 1) for setting in settings)
            side = ["-p", "no:harness"] if platform == "plain" else ["--harness"]
            forced = {} if platform == "plain" else {"HARNESS_PLATFORM": platform}
            variants[name] = ([*side, *args], {**forced, **environ})
        ledgers = Path(directory) / "ledgers"
        runs: dict[str, list[dict]] = {name: [] for name in variants}
        for round_ in range(options.rounds + 1):  # round 0 warms caches and bytecode and is not counted
            names = list(variants)
            names = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in names:
                args, extra = variants[name]
                done = run(args + ledger(args, ledgers / f"{name}{round_}"), root, {**env, **extra}, clock)
                if round_:
                    runs[name].append(done)
        summary(runs, options.tests, options.rounds)


def summary(runs: dict[str, list[dict]], tests: int, rounds: int) -> None:
    """Each variant's medians, then its wall and main-thread CPU against plain's of the same round, the
    median of the rounds: a host whose speed drifts over minutes moves a round's variants alike, so this
    ratio moves less than the ratio of the medians (a process's own luck still moves it)."""
    print(f"{tests} trivial tests, median seconds of {rounds} rounds:")
    print(
        f"{'':14}"
        + "".join(f"{name:>10}" for name, _, _ in STRETCHES)
        + f"{'wall':>8}{'user':>7}{'system':>7}{'main':>7}{'faults':>8}{'gc s':>7}{'full':>5}  threads"
    )
    for name, done in runs.items():
        stretches = [
            statistics.median(d["marks"][end] - d["marks"][begin] for d in done)
            for _, begin, end in STRETCHES
        ]
        wall = statistics.median(d["wall"] for d in done)
        user, system, main, faults, gc, full = (
            statistics.median(d[key] for d in done)
            for key in ("user", "system", "main", "faults", "gc", "full")
        )
        threads = "/".join(str(done[-1]["threads"].get(k, "?")) for k in ("configured", "exiting"))
        print(
            f"{name:14}"
            + "".join(f"{s:10.3f}" for s in stretches)
            + f"{wall:8.2f}{user:7.2f}{system:7.2f}{main:7.2f}{faults:8.0f}"
            + f"{gc:7.3f}{full:5.0f}  {threads}"
        )
    print("against plain in the same round, the median of the rounds:")
    for name, done in list(runs.items())[1:]:
        walls, mains = (
            [d[key] / p[key] for d, p in zip(done, runs["plain"], strict=True)] for key in ("wall", "main")
        )
        (low, high), (main_low, main_high) = median_interval(walls), median_interval(mains)
        print(
            f"{name:14} wall {statistics.median(walls):.3f} ({low:.3f}-{high:.3f}), "
            f"main thread's CPU {statistics.median(mains):.3f} ({main_low:.3f}-{main_high:.3f})"
        )
    print("(in brackets: the 95 % interval of each median)")


if __name__ == "__main__":
    main()
