"""What a test's ledger line costs on this host: microseconds per ``LedgerWriter.test`` call (formatting
and one unbuffered write), and per bare ``os.write`` of the same line, into a file in the temp directory.
The write is the system call that keeps each line through a SIGKILL; the difference is the formatting.

    python benchmarks/ledger_write.py [--lines 20000] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from harness.ledger import LedgerWriter

NODEID = "test_trivial.py::test_1234"


def per_line(lines: int, directory: str) -> tuple[float, float]:
    """(µs per writer.test, µs per os.write of its line), each over ``lines`` calls into a fresh file."""
    writer = LedgerWriter(directory, worker="timed")
    started = time.perf_counter()
    for _ in range(lines):
        writer.test(NODEID, "passed", 0.0001, 0.0001, 0.0001, NODEID)
    test = (time.perf_counter() - started) / lines
    line = writer.path.read_bytes().splitlines(keepends=True)[-1]
    descriptor = os.open(os.path.join(directory, "bare.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    started = time.perf_counter()
    for _ in range(lines):
        os.write(descriptor, line)
    bare = (time.perf_counter() - started) / lines
    os.close(descriptor)
    writer.close()
    return test * 1e6, bare * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    results = []
    for _ in range(options.runs):
        with tempfile.TemporaryDirectory() as directory:
            results.append(per_line(options.lines, directory))
    test, bare = min(r[0] for r in results), min(r[1] for r in results)
    print(
        f"a test's ledger line, fastest of {options.runs} runs of {options.lines}: "
        f"writer.test {test:.2f} µs, of which the write {bare:.2f} µs ({tempfile.gettempdir()})"
    )


if __name__ == "__main__":
    main()
