"""A fake ``torch`` whose ``torch.cuda`` has the caching allocator's API (names and bytes as in torch).

Found on the H200: NVML counts what torch keeps cached after tensors die and the ~0.6 GiB context a
process's first CUDA call creates, which grows later outside torch's allocator (kernels loaded on first
use, library handles). ``device_used()`` is what NVML would report for this process's device.
Put it in ``sys.modules["torch"]`` (monkeypatch.setitem) for code that reads torch without importing it.
"""

from __future__ import annotations

import types

GIB = 2**30


class FakeCuda:
    def __init__(self, context_bytes: int = int(0.6 * GIB)):
        self.context_bytes = context_bytes
        self.initialised = False
        self.allocated = 0  # bytes of live tensors
        self.cached = 0  # bytes freed by tensors, kept by the allocator
        self.peak = 0  # the most bytes reserved since the last reset_peak_memory_stats

    # -- torch.cuda's API --------------------------------------------------------------------------------
    def is_initialized(self) -> bool:
        return self.initialised

    def is_available(self) -> bool:
        return True

    def empty_cache(self) -> None:
        self.cached = 0

    def memory_reserved(self, device: int = 0) -> int:
        return self.allocated + self.cached

    def memory_allocated(self, device: int = 0) -> int:
        return self.allocated

    def device_count(self) -> int:
        return 1

    def max_memory_reserved(self, device: int = 0) -> int:
        return self.peak

    def reset_peak_memory_stats(self, device: int = 0) -> None:
        self.peak = self.memory_reserved()

    # -- what a test does with tensors ---------------------------------------------------------------------
    def alloc(self, nbytes: int) -> None:
        self.initialised = True
        take = min(self.cached, nbytes)  # cached blocks serve new tensors first
        self.cached -= take
        self.allocated += nbytes
        self.peak = max(self.peak, self.memory_reserved())

    def free(self, nbytes: int) -> None:
        self.allocated -= nbytes
        self.cached += nbytes

    def first_use(self, nbytes: int) -> None:
        """Kernels loaded on first use, library handles (cuBLAS): the context grows, reserved does not."""
        self.context_bytes += nbytes

    def device_used(self) -> int:
        return (self.context_bytes if self.initialised else 0) + self.memory_reserved()


def module(cuda: FakeCuda) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.cuda = cuda
    return torch
