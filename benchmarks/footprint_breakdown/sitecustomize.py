"""Backs docs/selection.md § What footprints cost (where the cost lies on Python 3.11): with this folder on
PYTHONPATH and ``FOOTPRINT_BREAKDOWN=FILE`` set, every Python process of a run appends to FILE one JSON
line at its exit: its CPU seconds, and the calls cProfile recorded per kind of owner (collect, fixture,
test), the switches and the seconds spent reading the profiler at them.

    FOOTPRINT_BREAKDOWN=/tmp/on.jsonl HARNESS_FOOTPRINTS=1 PYTHONPATH=benchmarks/footprint_breakdown \\
        python -m pytest tests/unit/test_reuse_vllm.py::test_reuse_hands_on_clean_engines_where_they_fit
"""

import atexit
import json
import os
import sys
import time

if os.environ.get("FOOTPRINT_BREAKDOWN"):
    from harness.select import profiler

    counts: dict = {"switches": 0, "calls": 0, "read_s": 0.0, "by": {}}

    def _stop(self) -> set[str]:
        started = time.process_time()
        self.profile.disable()
        entries = self.profile.getstats()
        self.profile.clear()
        calls = sum(entry.callcount for entry in entries)
        kind = (self.owner or "?").split(" ")[0]
        counts["by"][kind] = counts["by"].get(kind, 0) + calls
        counts["calls"] += calls
        counts["switches"] += 1
        counts["read_s"] += time.process_time() - started
        return {e.code.co_filename for e in entries if hasattr(e.code, "co_filename")}

    profiler.Profile._stop = _stop  # type: ignore[method-assign]

    def _dump() -> None:
        line = {"pid": os.getpid(), "argv": sys.argv[:1], "cpu_s": time.process_time(), **counts}
        with open(os.environ["FOOTPRINT_BREAKDOWN"], "a") as out:
            out.write(json.dumps(line) + "\n")

    atexit.register(_dump)
