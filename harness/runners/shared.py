"""What both runners share: the platform and settings they start on (a spawned process adopts its test's
ledger here), vLLM's share of the CPU, and the collection after a runner's references are dropped."""

from __future__ import annotations

import gc

from harness.platform import FACTS, allocator
from harness.tracking import patches, starts
from harness.tracking.context import current

# the share the runners give vLLM where the platform sets one (the CPU's; harness.platform.facts)
GPU_MEMORY_UTILIZATION = {n: f.vllm_memory_utilization for n, f in FACTS.items() if f.vllm_memory_utilization}


def free() -> None:
    """After a runner's references are dropped: collect garbage, then empty the allocator's cache."""
    gc.collect()
    allocator.empty_cache()


def environment():
    """This process's platform and settings; a test's spawned process (no plugin there) records its runners
    into the test's ledger from here on."""
    context = current()
    if starts.adopt(context) is not None:
        patches.install()
    return context.platform, context.settings
