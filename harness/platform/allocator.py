"""This process's caching allocator (torch's: ``torch.cuda`` on CUDA and ROCm, ``torch.xpu`` on Intel GPUs,
the same calls), read without importing torch.

Device figures from NVML or amdsmi count the blocks torch keeps cached after tensors die, and the
context a process creates with its first CUDA call. Neither is held by a runner: cached blocks serve this
process's next allocation, the context lives as long as the process. Admission and the release check ask
here so that neither reads as memory a runner holds. A process that never imported torch has neither.
"""

from __future__ import annotations

import sys


def _backend():
    """``torch.cuda`` or ``torch.xpu``, whichever this process initialised; None before either."""
    torch = sys.modules.get("torch")
    for name in ("cuda", "xpu"):
        backend = getattr(torch, name, None)
        if backend is not None and backend.is_initialized():
            return backend
    return None


def initialised() -> bool:
    """Whether this process has a device context yet (CUDA, HIP or Level Zero)."""
    return _backend() is not None


def empty_cache() -> None:
    """Give torch's cached, unreferenced blocks back to the device."""
    backend = _backend()
    if backend is not None:
        backend.empty_cache()


def reserved(index: int) -> int:
    """Bytes torch holds on visible device ``index`` (live tensors and cache); 0 without a context."""
    backend = _backend()
    return backend.memory_reserved(index) if backend is not None else 0


def peak_reserved() -> int | None:
    """The most bytes torch held on this process's devices since the last call (or its start), and the peak
    restarted from what it holds now; None where this process has no device context (never imported torch,
    or a CPU-only one): it held no device memory of its own. Called once a test, at its end."""
    backend = _backend()
    if backend is None:
        return None
    peak = 0
    for index in range(backend.device_count()):
        peak += backend.max_memory_reserved(index)
        backend.reset_peak_memory_stats(index)
    return peak
