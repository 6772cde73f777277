"""What the calls a test's harness work makes cost on this host, each alone: the clock reads, the ledger
line's write, a line of Python. A host whose clock or write costs microseconds (a VM whose clock source
traps) pays them per test, which no instruction count shows.

    python benchmarks/host_costs.py [--calls 200000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import timeit
from pathlib import Path

LINE = b'{"event": "test", "t": 1764745200.123, "nodeid": "test_trivial.py::test_1999", "outcome": "pass"}\n'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    calls = parser.parse_args().calls
    clocksource = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")
    print(f"clock source: {clocksource.read_text().strip() if clocksource.exists() else 'unknown'}")
    for clock in (time.time, time.monotonic, time.perf_counter, time.process_time):
        print(f"{clock.__name__}(): {timeit.timeit(clock, number=calls) / calls * 1e9:.0f} ns")
    with tempfile.TemporaryDirectory() as directory:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        with open(os.open(Path(directory) / "main.jsonl", flags, 0o644), "ab", buffering=0) as file:
            writes = calls // 10
            seconds = timeit.timeit(lambda: file.write(LINE), number=writes)
        print(f"an unbuffered {len(LINE)}-byte append (a ledger line): {seconds / writes * 1e9:.0f} ns")
    seconds = timeit.timeit("x = a + 1", setup="a = 1", number=calls * 10)
    print(f"a line of Python (x = a + 1): {seconds / calls / 10 * 1e9:.1f} ns")


if __name__ == "__main__":
    main()
