"""What every platform backend answers: the visible devices and their memory, in bytes, read in one pass."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import NamedTuple

from harness.platform.facts import FACTS

MIB = 2**20
GIB = 2**30  # every figure the platform layer gives is in bytes; these are for people and settings


@dataclass(frozen=True)  # not a NamedTuple: its ``index`` would shadow tuple.index
class Device:
    """One device as this process sees it.

    ``index`` is the visible (framework) index, ``physical`` the index in the management library's own
    enumeration (NVML or amdsmi order), which differs from the visible one under a mask or when CUDA
    orders devices by speed rather than PCI bus id.
    """

    index: int
    physical: int
    name: str
    uuid: str
    pci_bus_id: str
    total_bytes: int


class MemoryReading(NamedTuple):
    """Device memory in bytes. ``used`` excludes nothing: it is what the library reports as used."""

    used_bytes: int
    total_bytes: int

    @property
    def free_bytes(self) -> int:
        return self.total_bytes - self.used_bytes


class Platform(ABC):
    """One small interface per platform, so a fake NVML or amdsmi can be swapped in by tests."""

    name: str  # "cuda" | "rocm" | "xpu" | "cpu"
    mask_variable: str | None  # the variable a worker sets to pin its device(s)
    torch_device: str  # the torch device its tensors go to ("cuda" on ROCm too: HIP answers as CUDA)
    display_name: str = ""  # as messages name it ("ROCm")
    # vLLM's conftest waits after each runner for its memory to be given back (``wait_for_memory_to_settle``)
    waits_for_release: bool = False
    # vLLM (0.34) sizes its KV cache from the memory it measures free by default: a start's share is 1.0
    extensible_kv_cache: bool = False

    @property
    def gpu(self) -> bool:
        """A device apart from the host (False: the CPU platform); ``facts.FACTS``."""
        return FACTS[self.name].gpu

    @property
    def engine_memory_measured(self) -> bool:
        """Whether measured memory shows what a live vLLM engine holds (not on the CPU); ``facts.FACTS``."""
        return FACTS[self.name].engine_memory_measured

    @property
    def cuda_fork_guard(self) -> bool:
        """Whether a vLLM engine start gets ``cuda_fork``'s guard (only CUDA); ``facts.FACTS``."""
        return FACTS[self.name].cuda_fork_guard

    @abstractmethod
    def devices(self) -> list[Device]:
        """The visible devices, in visible order."""

    def uuids(self) -> list[str]:
        """The visible devices' UUIDs, in visible order."""
        return [device.uuid for device in self.devices()]

    @abstractmethod
    def memory(self) -> dict[int, MemoryReading]:
        """Memory of every visible device, keyed by visible index, read in one pass."""

    @abstractmethod
    def process_memory(self, pids: set[int]) -> dict[int, int]:
        """Bytes the processes ``pids`` use on each visible device, as the library counts them per process.

        What a runner's engine process holds, apart from what this process's own CUDA context grows by.
        """
