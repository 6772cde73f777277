"""What a session built before its first test (the modules it imported, the items it collected) kept out of
the cyclic garbage collector's passes while the tests run: ``gc.freeze``.

A suite that imports torch and vLLM while collecting holds hundreds of thousands of objects the collector
tracks, and a full pass walks them all; frozen, those objects cost a pass nothing, as in a conftest that
collects after every test. vLLM's own ``cleanup_dist_env_and_memory`` unfreezes before it collects (what
an in-process engine froze must be able to go), so on vLLM's tree the freeze ends at the first test's
cleanup, and is not renewed: renewing it would hold such an engine's objects past its shutdown
(docs/measurements.md, ``benchmarks/gc_freeze.py``). Frozen
objects still go when their last reference does; only garbage in reference cycles among them waits for the
session's end, when they are handed back (``gc.unfreeze``) for the interpreter's own last passes. Meanwhile
``gc.get_objects`` and ``gc.get_referrers`` do not list them: ``freeze_collected = false`` in
``[tool.harness]`` (or ``HARNESS_FREEZE_COLLECTED=0``) leaves the collector alone.
"""

from __future__ import annotations

import gc

import pytest


class Frozen:
    """Freezes at the end of collection, in the process that runs the tests; hands back at unconfigure."""

    def __init__(self) -> None:
        self.froze = False

    @pytest.hookimpl(trylast=True)  # after every plugin has built and filtered the items
    def pytest_collection_finish(self) -> None:
        # an outer session (a pytest run in process by a test) froze already: those are its to hand back
        if gc.get_freeze_count():
            return
        gc.freeze()
        self.froze = True

    def pytest_unconfigure(self) -> None:
        if self.froze:
            gc.unfreeze()
