"""Wall-time ratio of 2000 trivial tests with the harness plugin asked vs plain pytest (goal <= 1.05).

    python benchmarks/plugin_overhead.py [--tests 2000] [--rounds 15]

Both variants run as fresh ``python -m pytest`` processes over the same generated file, alternating, on
the platform detected here (or ``HARNESS_PLATFORM``); "plain" is
``-p no:harness``. "with" (``--harness``) writes the ledger (one ``test`` line per test) into a
temporary directory, as ``harness run`` does. The figure is the median of each round's with/plain ratio:
a round runs the two back to back (which goes first alternates), so a host that slows for a while slows
both sides of a round alike. Each round's walls are printed so noise is visible; the ratio of the medians
and the CPU seconds' ratio are printed above the figure.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def wall(args: list[str], cwd: Path, env: dict) -> tuple[float, float]:
    """(wall, CPU) seconds of one pytest process; CPU (user + system) moves less with the host's load."""
    started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd, env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return time.perf_counter() - started, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        body = "".join(f"def test_{n}():\n    pass\n\n\n" for n in range(options.tests))
        (root / "test_trivial.py").write_text(body)
        (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
        env = dict(os.environ)  # the platform detected here (or HARNESS_PLATFORM), as a user's run has
        # Bytecode is cached, as for any installed package (pip compiles at install): with
        # PYTHONDONTWRITEBYTECODE=1 (set on this machine) every run compiled harness's modules from
        # source, and pytest rewrote their asserts, which plain pytest's precompiled modules never pay.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        common = ["-q", "-p", "no:cacheprovider", "test_trivial.py"]
        plain_args = common + ["-p", "no:harness"]
        wall(plain_args, root, env)  # warm the file system cache and bytecode
        wall(common + [f"--harness-ledger-dir={root / 'warm'}"], root, env)
        walls: dict[str, list[float]] = {"plain": [], "with": []}
        cpus: dict[str, list[float]] = {"plain": [], "with": []}
        for round_ in range(options.rounds):
            # a fresh ledger each round, as each harness run has: a reused one grows and is re-read
            variants = {
                "plain": plain_args,
                "with": common + ["--harness", f"--harness-ledger-dir={root / f'ledger{round_}'}"],
            }
            order = list(variants) if round_ % 2 == 0 else list(reversed(variants))  # neither always first
            for name in order:
                seconds, cpu = wall(variants[name], root, env)
                walls[name].append(seconds)
                cpus[name].append(cpu)
            plain, with_plugin = walls["plain"][-1], walls["with"][-1]
            print(f"round {round_ + 1}: plain {plain:.2f} s, with plugin {with_plugin:.2f} s")
        plain, with_plugin = (statistics.median(walls[name]) for name in ("plain", "with"))
        cpu_plain, cpu_with = (statistics.median(cpus[name]) for name in ("plain", "with"))
        paired = statistics.median(w / p for w, p in zip(walls["with"], walls["plain"], strict=True))
        print(
            f"CPU seconds, median of {options.rounds}: plain {cpu_plain:.2f}, with plugin {cpu_with:.2f}, "
            f"ratio {cpu_with / cpu_plain:.3f}"
        )
        print(f"ratio of the medians: {with_plugin / plain:.3f}")
        print(
            f"{options.tests} trivial tests, median of {options.rounds}: plain {plain:.2f} s, "
            f"with plugin {with_plugin:.2f} s, ratio {paired:.3f} (the rounds' median; goal <= 1.05)"
        )


if __name__ == "__main__":
    main()
