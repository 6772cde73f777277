"""detect(): NVML, then amdsmi, then the host; HARNESS_PLATFORM forces; the library is initialised once."""

import importlib
import os
import threading

import pytest

from harness import platform as platforms
from harness.errors import DeviceMaskError, PlatformError
from harness.platform import detect
from harness.platform.amd import AmdPlatform
from harness.platform.host import HostPlatform
from harness.platform.nvidia import NvidiaPlatform
from harness.tracking import context
from tests.fakes import gpu


def test_nvml_with_devices_is_cuda(fake_gpus):
    fake_gpus([gpu(0), gpu(1)])
    detection = detect(dict(os.environ))
    assert isinstance(detection.platform, NvidiaPlatform)
    assert detection.platform.name == "cuda"
    assert detection.reason.startswith("NVML answered: 2 GPU(s), driver 580.159.04")


def test_amdsmi_with_devices_is_rocm(fake_gpus):
    fake_gpus([gpu(0)], vendor="amd")
    detection = detect(dict(os.environ))
    assert isinstance(detection.platform, AmdPlatform)
    assert detection.reason == "amdsmi answered: 1 GPU(s) (tests.fakes.amdsmi)"


def test_nvml_without_devices_falls_through_to_cpu_with_reasons(fake_gpus):
    fake_gpus([])
    detection = detect(dict(os.environ))
    assert isinstance(detection.platform, HostPlatform)
    assert detection.reason == (
        "no GPU: tests.fakes.pynvml: NVML reports no GPU; tests.fakes.absent not installed; "
        "tests.fakes.absent not installed"
    )


def test_no_library_at_all_is_cpu():
    env = {"HARNESS_NVML_MODULE": "tests.fakes.absent", "HARNESS_AMDSMI_MODULE": "tests.fakes.absent"}
    detection = detect(env)
    assert detection.platform.name == "cpu"
    assert detection.reason.startswith("no GPU: tests.fakes.absent not installed")


def test_library_init_failure_is_the_reason(monkeypatch):
    monkeypatch.delenv("FAKE_GPUS", raising=False)
    monkeypatch.delenv("FAKE_GPUS_FILE", raising=False)
    platforms._initialised.cache_clear()
    env = {"HARNESS_NVML_MODULE": "tests.fakes.pynvml", "HARNESS_AMDSMI_MODULE": "tests.fakes.amdsmi"}
    reason = detect(env).reason
    assert "tests.fakes.pynvml: NVML Shared Library Not Found" in reason
    assert "tests.fakes.amdsmi: An error occurred with code: 54" in reason


@pytest.mark.parametrize("forced", ["bogus", "CUDA", "gpu"])
def test_bad_forced_platform_is_one_line(forced):
    with pytest.raises(
        PlatformError, match=rf"^HARNESS_PLATFORM='{forced}': expected one of cuda, rocm, xpu, cpu$"
    ):
        detect({"HARNESS_PLATFORM": forced})


def test_forced_cpu_ignores_gpus(fake_gpus):
    fake_gpus([gpu(0)])
    detection = detect({**os.environ, "HARNESS_PLATFORM": "cpu"})
    assert detection.platform.name == "cpu" and detection.reason == "HARNESS_PLATFORM=cpu"


def test_forced_cuda_without_nvml_is_an_error():
    with pytest.raises(
        PlatformError, match=r"HARNESS_PLATFORM=cuda but NVML does not answer \(tests.fakes.absent"
    ):
        detect({"HARNESS_PLATFORM": "cuda", "HARNESS_NVML_MODULE": "tests.fakes.absent"})


def test_forced_rocm_skips_nvml(fake_gpus):
    fake_gpus([gpu(0)], vendor="amd")
    env = {**os.environ, "HARNESS_PLATFORM": "rocm", "HARNESS_NVML_MODULE": "tests.fakes.pynvml"}
    detection = detect(env)
    assert detection.platform.name == "rocm" and detection.reason.startswith("HARNESS_PLATFORM=rocm")


def test_bad_mask_on_detected_cuda_raises(fake_gpus):
    fake_gpus([gpu(0)])
    with pytest.raises(DeviceMaskError, match="CUDA_VISIBLE_DEVICES='abc'"):
        detect({**os.environ, "CUDA_VISIBLE_DEVICES": "abc"})


def test_library_is_initialised_once_per_process(fake_gpus):
    fake_gpus([gpu(0)])
    fake = importlib.import_module("tests.fakes.pynvml")
    platforms._initialised.cache_clear()
    before = fake.init_calls
    for _ in range(3):
        detect(dict(os.environ)).platform.memory()
    assert fake.init_calls - before == 1


def test_a_forced_gpu_platform_is_detected_at_once_in_the_calling_thread(fake_gpus):
    """The context a session builds holds the platform itself, its library started before ``build``
    returned and no thread left behind; a process detects once and hands that platform down."""
    fake_gpus([gpu(0), gpu(1)])
    fake = importlib.import_module("tests.fakes.pynvml")
    platforms._initialised.cache_clear()
    before, threads = fake.init_calls, threading.enumerate()
    built = context.build(None, {**os.environ, "HARNESS_PLATFORM": "cuda"})
    assert isinstance(built.platform, NvidiaPlatform) and fake.init_calls == before + 1
    assert threading.enumerate() == threads
    assert built.platform.uuids() == [gpu(0)["uuid"], gpu(1)["uuid"]]


def test_a_forced_gpu_platforms_bad_mask_is_raised_when_the_context_is_built(fake_gpus):
    fake_gpus([gpu(0)])
    env = {**os.environ, "HARNESS_PLATFORM": "cuda", "CUDA_VISIBLE_DEVICES": "abc"}
    with pytest.raises(DeviceMaskError, match="CUDA_VISIBLE_DEVICES='abc'"):
        context.build(None, env)
