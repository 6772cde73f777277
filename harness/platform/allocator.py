"""This process's caching allocator (torch's, on CUDA and ROCm alike), read without importing torch.

Device figures from NVML or amdsmi count the blocks torch keeps cached after tensors die, and the
context a process creates with its first CUDA call. Neither is held by a runner: cached blocks serve this
process's next allocation, the context lives as long as the process. Admission and the release check ask
here so that neither reads as memory a runner holds. A process that never imported torch has neither.
"""

from __future__ import annotations

import sys


def _cuda():
    torch = sys.modules.get("torch")
    return torch.cuda if torch is not None and torch.cuda.is_initialized() else None


def initialised() -> bool:
    """Whether this process has a CUDA (or HIP) context yet."""
    return _cuda() is not None


def empty_cache() -> None:
    """Give torch's cached, unreferenced blocks back to the device."""
    cuda = _cuda()
    if cuda is not None:
        cuda.empty_cache()


def reserved(index: int) -> int:
    """Bytes torch holds on visible device ``index`` (live tensors and cache); 0 without a context."""
    cuda = _cuda()
    return cuda.memory_reserved(index) if cuda is not None else 0
