"""NvidiaPlatform over the fake NVML: visible→physical mapping, bytes, one pass, errors; the driver's list."""

import importlib
import os

import pytest

from harness.errors import DeviceMaskError, PlatformError
from harness.platform.nvidia import NvidiaPlatform
from tests.fakes import gpu

GIB = 2**30


@pytest.fixture
def nvml(fake_gpus):
    def machine(devices, **env):
        fake_gpus(devices)
        module = importlib.import_module("tests.fakes.pynvml")
        module.nvmlInit()
        return lambda: NvidiaPlatform(module, env)

    return machine


def test_memory_is_nvml_bytes(nvml):
    platform = nvml([gpu(0, total=80 * GIB, used=3 * GIB + 123), gpu(1, total=80 * GIB, used=0)])()
    readings = platform.memory()
    assert readings[0].used_bytes == 3 * GIB + 123
    assert readings[0].total_bytes == 80 * GIB
    assert readings[0].free_bytes == 77 * GIB - 123
    assert readings[1].used_bytes == 0
    assert [d.total_bytes for d in platform.devices()] == [80 * GIB, 80 * GIB]


def test_memory_follows_the_device_between_polls(nvml, fake_gpus):
    platform = nvml([gpu(0, used=GIB)])()
    assert platform.memory()[0].used_bytes == GIB
    fake_gpus([gpu(0, used=5 * GIB)])
    assert platform.memory()[0].used_bytes == 5 * GIB


def test_mask_maps_visible_index_to_physical_by_uuid(nvml):
    devices = [gpu(0), gpu(1), gpu(2), gpu(3)]
    platform = nvml(devices, CUDA_VISIBLE_DEVICES=f"{devices[3]['uuid']},1")()
    assert [(d.index, d.physical, d.uuid) for d in platform.devices()] == [
        (0, 3, devices[3]["uuid"]),
        (1, 1, devices[1]["uuid"]),
    ]
    assert set(platform.memory()) == {0, 1}


def test_mask_integers_index_pci_bus_order_not_nvml_order(nvml):
    # NVML here enumerates a device on bus 0x20 before one on bus 0x11.
    late, early = gpu(0x10, used=1), gpu(1, used=2)
    platform = nvml([late, early], CUDA_VISIBLE_DEVICES="0")()
    (device,) = platform.devices()
    assert (device.uuid, device.physical, device.pci_bus_id) == (early["uuid"], 1, "0000:11:00.0")
    assert platform.memory()[0].used_bytes == 2


def test_memory_keyed_by_visible_index(nvml):
    platform = nvml([gpu(0, used=10), gpu(1, used=20), gpu(2, used=30)], CUDA_VISIBLE_DEVICES="2,0")()
    assert {i: r.used_bytes for i, r in platform.memory().items()} == {0: 30, 1: 10}


def test_bad_mask_names_variable_and_value(nvml):
    with pytest.raises(DeviceMaskError, match=r"CUDA_VISIBLE_DEVICES='0,5': index 5 is past the 2 device"):
        nvml([gpu(0), gpu(1)], CUDA_VISIBLE_DEVICES="0,5")()


def test_empty_mask_leaves_no_device(nvml):
    platform = nvml([gpu(0)], CUDA_VISIBLE_DEVICES="")()
    assert platform.devices() == [] and platform.memory() == {}


def test_nvml_failure_is_a_one_line_platform_error(nvml, monkeypatch):
    platform = nvml([gpu(0)])()
    monkeypatch.setattr(importlib.import_module("tests.fakes.pynvml"), "_references", 0)  # as after shutdown
    with pytest.raises(PlatformError, match="^NVML failed while reading device memory: Uninitialized$"):
        platform.memory()


def test_a_forked_child_initializes_nvml_again_and_reads_the_same_devices(nvml):
    """GPU, 2026-12-06: a test that forks its body (vLLM's fork_new_process_for_each_test) failed its start
    with "NVML failed while reading device memory: Uninitialized": NVML is uninitialized in a forked child."""
    platform = nvml([gpu(0, used=2 * GIB), gpu(1, used=5 * GIB)], CUDA_VISIBLE_DEVICES="1")()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: NVML as a fork leaves it
        fake = importlib.import_module("tests.fakes.pynvml")
        fake._references = 0
        try:
            said = str(platform.memory()[0].used_bytes // GIB)
        except BaseException as error:  # noqa: BLE001 (the child's answer is the reading)
            said = repr(error)
        os.write(write, said.encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 1000).decode() == "5"  # GPU 1's, the only visible one
    assert platform.memory()[0].used_bytes == 5 * GIB  # the parent's own handles untouched


def test_fake_error_classes_have_nvml_value_semantics():
    fake = importlib.import_module("tests.fakes.pynvml")
    error = fake.NVMLError(fake.NVML_ERROR_NOT_FOUND)
    assert type(error) is fake.NVMLError_NotFound
    assert isinstance(error, fake.NVMLError)
    assert error.value == 6 and str(error) == "Not Found"
    assert fake.NVMLError_LibraryNotFound().value == fake.NVML_ERROR_LIBRARY_NOT_FOUND
    assert fake.NVMLError_NotFound() == error


def test_process_memory_is_per_visible_device_for_the_given_pids(nvml):
    """H200: NVML listed the test process (its context, 612 MiB) and a child's 2.5 GiB by their own pids."""
    engine = {**gpu(1, used=3 * GIB), "processes": {"460": 612 * 2**20, "481": 2 * GIB + 1}}
    other = {**gpu(0, used=GIB), "processes": {"999": GIB}}
    platform = nvml([other, engine], CUDA_VISIBLE_DEVICES="1")()
    assert platform.process_memory({481}) == {0: 2 * GIB + 1}
    assert platform.process_memory({999}) == {0: 0}  # on a device this process does not see


def test_process_memory_nvml_cannot_tell_counts_nothing(nvml):
    """Under MIG (or Windows WDDM) nvidia-ml-py reports usedGpuMemory as None."""
    platform = nvml([{**gpu(0, used=GIB), "processes": {"7": None}}])()
    assert platform.process_memory({7}) == {0: 0}
