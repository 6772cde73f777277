"""The benchmarks' own arithmetic, where a slip would print a wrong figure."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
plugin_overhead = importlib.import_module("plugin_overhead")  # fails, never skips, if it breaks

FORKED = """==25753== Cachegrind, a high-precision tracing profiler
==25753== Command: python -m pytest -q test_trivial.py --harness
==25753==
==25756==
==25756== I   refs:      790,736,519
2000 passed in 36.55s
==25753==
==25753== I   refs:      7,671,847,023
"""


def test_the_instructions_are_pytests_not_a_forked_childs():
    assert plugin_overhead.pytest_refs(FORKED) == 7_671_847_023


def test_a_report_without_pytests_count_says_so():
    with pytest.raises(SystemExit, match="no instruction count for pytest"):
        plugin_overhead.pytest_refs(FORKED.rsplit("==25753==", 1)[0])
