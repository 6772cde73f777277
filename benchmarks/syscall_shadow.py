"""What one system call a test costs the Python that runs around it, on this host: blocks of a pytest-like
Python workload (dict, attribute and string work: 0.14-0.19 ms an iteration on the two hosts), each
iteration alone or followed by one unbuffered ``os.write`` of a ledger-sized line, alternating. The
difference per iteration, set against the bare write's own time, is the shadow the call casts (caches or
TLB a guest kernel's entry cools).

    python benchmarks/syscall_shadow.py [--iterations 2000] [--blocks 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

LINE = (
    b'{"event": "test", "t": 1764670000.123, "nodeid": "test_trivial.py::test_1234", "outcome": "passed", '
    b'"setup_s": 0.000, "call_s": 0.000, "teardown_s": 0.000, "next": "test_trivial.py::test_1235"}\n'
)


class Node:
    def __init__(self, n: int) -> None:
        self.name, self.keywords, self.parent = f"test_{n}", {"a": n}, None


def work(n: int) -> int:
    """About what pytest does for a trivial test: objects, dicts, attribute reads, strings."""
    total = 0
    for k in range(60):
        node = Node(n + k)
        mapping = {f"k{j}": j for j in range(12)}
        total += len(node.name) + mapping["k3"] + node.keywords["a"] + len("::".join((node.name, "x")))
    return total


def block(iterations: int, descriptor: int | None) -> float:
    """Microseconds per iteration."""
    started = time.perf_counter()
    for n in range(iterations):
        work(n)
        if descriptor is not None:
            os.write(descriptor, LINE)
    return (time.perf_counter() - started) / iterations * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--blocks", type=int, default=10)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        descriptor = os.open(os.path.join(directory, "ledger.jsonl"), flags, 0o644)
        alone, written = [], []
        block(options.iterations, None)  # warm
        for _ in range(options.blocks):
            alone.append(block(options.iterations, None))
            written.append(block(options.iterations, descriptor))
        started = time.perf_counter()
        for _ in range(options.iterations):
            os.write(descriptor, LINE)
        bare = (time.perf_counter() - started) / options.iterations * 1e6
        os.close(descriptor)
    work_alone, work_written = statistics.median(alone), statistics.median(written)
    shadow = work_written - work_alone - bare
    print(
        f"an iteration, median of {options.blocks} blocks: {work_alone:.1f} µs alone, {work_written:.1f} µs "
        f"with a write; a bare write {bare:.2f} µs; the write's shadow {shadow:.2f} µs"
    )


if __name__ == "__main__":
    main()
