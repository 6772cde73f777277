"""HostPlatform: psutil for the host, NUMA node 0 meminfo (kB → bytes) for the device figure."""

import subprocess
import sys

import psutil
import pytest

from harness.errors import PlatformError
from harness.platform.host import NODE0_MEMINFO, HostPlatform

MEMINFO = """Node 0 MemTotal:        9136332 kB
Node 0 MemFree:         7254900 kB
Node 0 MemUsed:         1881432 kB
Node 0 Active:           987654 kB
Node 0 Active(file):      100000 kB
Node 0 Inactive(file):    200000 kB
Node 0 SReclaimable:       30000 kB
"""


def test_node_meminfo_is_read_in_bytes(tmp_path):
    path = tmp_path / "meminfo"
    path.write_text(MEMINFO)
    platform = HostPlatform(path)
    node = platform.node_memory()
    assert node.total_bytes == 9136332 * 1024
    # page cache and reclaimable slab count as free, as vLLM's CPU worker counts them
    assert node.used_bytes == (9136332 - 7254900 - 100000 - 200000 - 30000) * 1024
    assert platform.memory() == {0: node}
    (device,) = platform.devices()
    assert (device.index, device.uuid, device.total_bytes) == (0, "cpu", 9136332 * 1024)


def test_without_numa_the_device_is_the_host(tmp_path):
    platform = HostPlatform(tmp_path / "absent")
    assert platform.node_memory() is None
    assert platform.memory()[0].total_bytes == psutil.virtual_memory().total


def test_host_memory_matches_psutil():
    host = HostPlatform().host_memory()
    memory = psutil.virtual_memory()
    assert host.total_bytes == memory.total
    assert 0 < host.used_bytes < host.total_bytes


@pytest.mark.skipif(not NODE0_MEMINFO.exists(), reason="this kernel reports no NUMA node 0")
def test_real_node0_is_at_most_the_host():
    platform = HostPlatform()
    assert 0 < platform.node_memory().total_bytes <= platform.host_memory().total_bytes


def test_broken_meminfo_is_a_platform_error(tmp_path):
    path = tmp_path / "meminfo"
    path.write_text("Node 0 Active: 1 kB\n")
    with pytest.raises(PlatformError, match="no MemTotal/MemFree"):
        HostPlatform(path).memory()


def test_process_memory_is_the_resident_memory_of_live_pids():
    """A CPU engine's memory is its process's; a pid that has exited counts nothing."""
    up = "import time; print('up', flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", up], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "up\n"  # read mid-exec, its resident memory was still growing
        resident = HostPlatform().process_memory({child.pid})[0]
        assert 0 < resident == pytest.approx(psutil.Process(child.pid).memory_info().rss, rel=0.5)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert HostPlatform().process_memory({child.pid}) == {0: 0}
