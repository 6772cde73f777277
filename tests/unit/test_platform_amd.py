"""AmdPlatform over the fake amdsmi: bytes APIs, the MiB API converted, ROCr/HIP masks."""

import importlib

import pytest

from harness.errors import DeviceMaskError
from harness.platform.amd import AmdPlatform
from tests.fakes import gpu

GIB = 2**30
MIB = 2**20


def mi300(number, used):
    return gpu(number, total=192 * GIB, used=used, name="AMD Instinct MI300X")


@pytest.fixture
def amd(fake_gpus):
    def machine(devices, **env):
        fake_gpus(devices, vendor="amd")
        module = importlib.import_module("tests.fakes.amdsmi")
        module.amdsmi_init()
        return AmdPlatform(module, env)

    return machine


def test_bytes_api(amd):
    platform = amd([mi300(0, used=30 * GIB + 5)])
    reading = platform.memory()[0]
    assert (reading.used_bytes, reading.total_bytes) == (30 * GIB + 5, 192 * GIB)
    assert platform.devices()[0].name == "AMD Instinct MI300X"
    assert platform.devices()[0].total_bytes == 192 * GIB


def test_mib_api_is_converted_to_bytes(amd, monkeypatch):
    monkeypatch.setenv("FAKE_AMDSMI_BYTES_API", "0")
    platform = amd([mi300(0, used=30 * GIB + 5)])
    reading = platform.memory()[0]
    # Whole MiB from the MiB call, times 2**20: the same order as the bytes call, not 30720 "bytes".
    assert (reading.used_bytes, reading.total_bytes) == (30 * GIB, 192 * GIB)


def test_fake_units_match_the_real_library(amd):
    amd([mi300(0, used=7 * GIB + 3 * MIB + 5)])
    fake = importlib.import_module("tests.fakes.amdsmi")
    (handle,) = fake.amdsmi_get_processor_handles()
    usage = fake.amdsmi_get_gpu_vram_usage(handle)
    assert fake.amdsmi_get_gpu_memory_usage(handle, fake.AmdSmiMemoryType.VRAM) == 7 * GIB + 3 * MIB + 5
    assert usage == {"vram_total": 192 * 1024, "vram_used": 7 * 1024 + 3}


def test_rocr_filters_then_hip_indexes_what_is_left(amd):
    devices = [mi300(n, used=n) for n in range(4)]
    platform = amd(devices, ROCR_VISIBLE_DEVICES="1,2,3", HIP_VISIBLE_DEVICES="2,0")
    assert [(d.index, d.physical) for d in platform.devices()] == [(0, 3), (1, 1)]
    assert {i: r.used_bytes for i, r in platform.memory().items()} == {0: 3, 1: 1}


def test_hip_reads_cuda_visible_devices_when_unset(amd):
    platform = amd([mi300(0, 0), mi300(1, 0)], CUDA_VISIBLE_DEVICES="1")
    assert [d.physical for d in platform.devices()] == [1]


def test_gpu_prefixed_uuid_matches_amdsmi_uuid(amd):
    devices = [mi300(0, 0), mi300(1, 0)]
    devices[1]["uuid"] = "5cff74a1-0000-1000-80e9-a1fc3fd3a5b4"  # amdsmi's form, no GPU- prefix
    platform = amd(devices, HIP_VISIBLE_DEVICES="GPU-5cff74a1")
    assert [d.uuid for d in platform.devices()] == [devices[1]["uuid"]]


def test_bad_rocr_mask_names_the_variable(amd):
    with pytest.raises(DeviceMaskError, match="ROCR_VISIBLE_DEVICES='x'"):
        amd([mi300(0, 0)], ROCR_VISIBLE_DEVICES="x")


def test_process_memory_is_vram_bytes_of_the_given_pids(amd):
    engine = {**mi300(0, used=30 * GIB), "processes": {"481": 29 * GIB, "77": GIB}}
    platform = amd([engine])
    assert platform.process_memory({481}) == {0: 29 * GIB}
    assert platform.process_memory(set()) == {0: 0}
