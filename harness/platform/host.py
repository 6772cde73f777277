"""The CPU platform: one device, the host, whose memory is NUMA node 0's where the kernel reports nodes.

vLLM's CPU backend sizes its KV cache from, and checks free memory on, NUMA node 0 (on a multi-node host
a part of its memory), so node 0 is the figure a memory wait must watch; the host figure is shown beside it.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import PlatformError
from harness.platform.base import Device, MemoryReading, Platform

NODE0_MEMINFO = Path("/sys/devices/system/node/node0/meminfo")


class HostPlatform(Platform):
    name = "cpu"
    mask_variable = None
    torch_device = "cpu"
    display_name = "CPU"

    def __init__(self, node_meminfo: Path = NODE0_MEMINFO):
        self._node_meminfo = node_meminfo

    def host_memory(self) -> MemoryReading:
        """The whole host; used = total - available, since page cache is given back on demand."""
        import psutil  # here and below, not at import: a NUMA host and most sessions never need it

        memory = psutil.virtual_memory()
        return MemoryReading(memory.total - memory.available, memory.total)

    def node_memory(self) -> MemoryReading | None:
        """NUMA node 0, or None without NUMA info.

        Free is what vLLM's CPU worker counts as available on the node: MemFree plus reclaimable page
        cache (Active(file), Inactive(file), SReclaimable). MemFree alone reads GiB lower after file I/O
        and would make a memory wait hold an engine vLLM itself would start.
        """
        try:
            text = self._node_meminfo.read_text()
        except FileNotFoundError:
            return None
        fields = {}
        for line in text.splitlines():
            parts = line.split()  # "Node 0 MemTotal:   9136332 kB"
            if len(parts) >= 4 and parts[2].endswith(":"):
                fields[parts[2][:-1]] = int(parts[3]) * 1024
        reclaimable = sum(fields.get(key, 0) for key in ("Active(file)", "Inactive(file)", "SReclaimable"))
        try:
            return MemoryReading(fields["MemTotal"] - fields["MemFree"] - reclaimable, fields["MemTotal"])
        except KeyError:
            raise PlatformError(f"{self._node_meminfo} has no MemTotal/MemFree lines") from None

    def devices(self) -> list[Device]:
        return [
            Device(
                index=0,
                physical=0,
                name=f"{os.uname().machine} host ({os.cpu_count()} CPUs)",
                uuid="cpu",
                pci_bus_id="",
                total_bytes=self.memory()[0].total_bytes,
            )
        ]

    def memory(self) -> dict[int, MemoryReading]:
        return {0: self.node_memory() or self.host_memory()}

    def process_memory(self, pids: set[int]) -> dict[int, int]:
        """Resident bytes of those of ``pids`` still alive: a CPU engine's memory is its process's."""
        import psutil

        resident = 0
        for pid in pids:
            try:
                resident += psutil.Process(pid).memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return {0: resident}
