"""detect(): NVML, then amdsmi, then the host; HARNESS_PLATFORM forces; the library is initialised once."""

import importlib
import os
import threading

import pytest

from harness import platform as platforms
from harness.errors import DeviceMaskError, PlatformError
from harness.platform import detect, nvidia
from harness.platform.amd import AmdPlatform
from harness.platform.host import HostPlatform
from harness.platform.nvidia import NvidiaPlatform
from harness.platform.pending import PendingPlatform
from tests.fakes import driver_listing, gpu


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
        "no GPU: tests.fakes.pynvml: NVML reports no GPU; tests.fakes.absent not installed"
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
        PlatformError, match=rf"^HARNESS_PLATFORM='{forced}': expected one of cuda, rocm, cpu$"
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


@pytest.fixture
def held_nvml(fake_gpus, monkeypatch):
    """Two fake GPUs whose ``nvmlInit`` is held until the test sets ``go_on``: (started, go_on)."""
    fake_gpus([gpu(0), gpu(1)])
    fake = importlib.import_module("tests.fakes.pynvml")
    platforms._initialised.cache_clear()
    started, go_on = threading.Event(), threading.Event()
    real_init = fake.nvmlInit

    def held_init():
        started.set()
        assert go_on.wait(10)
        real_init()

    monkeypatch.setattr(fake, "nvmlInit", held_init)
    return started, go_on


def test_a_forced_gpu_platform_is_named_at_once_and_listed_in_a_thread(held_nvml):
    """``detect_later`` returns while NVML is still starting; the devices are detect's, once it is done."""
    started, go_on = held_nvml
    env = {**os.environ, "HARNESS_PLATFORM": "cuda"}
    pending = platforms.detect_later(env)
    assert started.wait(10)  # nvmlInit runs in another thread, and detect_later has returned
    assert (pending.name, pending.mask_variable) == ("cuda", "CUDA_VISIBLE_DEVICES")
    go_on.set()
    assert isinstance(pending.ready(), NvidiaPlatform)
    assert pending.devices() == detect(env).platform.devices()
    assert pending.memory() == pending.ready().memory()


def test_a_child_forked_while_the_thread_ran_detects_for_itself(held_nvml):
    """The fork leaves the child without the thread (vLLM forks a test's process): its answer comes from
    the child's own detection, not from a thread that will never end there."""
    started, go_on = held_nvml
    pending = platforms.detect_later({**os.environ, "HARNESS_PLATFORM": "cuda"})
    assert started.wait(10)
    child = os.fork()
    if child == 0:  # the child: no detect thread; its own detection must not wait for one
        code = 1
        try:
            go_on.set()
            code = 0 if [d.uuid for d in pending.devices()] == [gpu(0)["uuid"], gpu(1)["uuid"]] else 1
        finally:
            os._exit(code)  # never back into the parent's pytest session
    go_on.set()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(pending.devices()) == 2


def test_a_forced_gpu_platforms_failure_is_raised_when_its_devices_are_asked_for(fake_gpus):
    fake_gpus([gpu(0)])
    env = {**os.environ, "HARNESS_PLATFORM": "cuda", "CUDA_VISIBLE_DEVICES": "abc"}
    pending = platforms.detect_later(env)
    for _ in range(2):  # every question gets the error, not only the first
        with pytest.raises(DeviceMaskError, match="CUDA_VISIBLE_DEVICES='abc'"):
            pending.devices()


@pytest.mark.parametrize("forced", ["", "cpu"])
def test_without_a_forced_gpu_platform_detection_runs_at_once(fake_gpus, forced):
    fake_gpus([gpu(0)])
    found = platforms.detect_later({**os.environ, "HARNESS_PLATFORM": forced})
    assert found.ready() is found and found.name == (forced or "cuda")


def test_a_listed_gpu_platform_names_its_devices_without_nvml_and_starts_it_for_memory(held_nvml, tmp_path):
    """With the driver's listing, naming the visible devices (a mask applied) starts no NVML, and no thread
    waits for it; the first memory question starts it, in the asking thread."""
    started, go_on = held_nvml
    listing = nvidia.driver_listing(*driver_listing(tmp_path, [gpu(0), gpu(1)]))
    env = {**os.environ, "HARNESS_PLATFORM": "cuda", "CUDA_VISIBLE_DEVICES": "1"}
    pending = PendingPlatform("cuda", "CUDA_VISIBLE_DEVICES", env, listing)
    assert pending.uuids() == [gpu(1)["uuid"]]
    assert not started.wait(0.2)
    go_on.set()
    assert pending.memory() == detect(env).platform.memory() and started.is_set()
    assert pending.uuids() == pending.ready().uuids()


def test_a_listing_nvml_contradicts_is_an_error_and_a_bad_mask_is_one_without_nvml(fake_gpus, tmp_path):
    fake_gpus([gpu(0), gpu(1)])
    listing = nvidia.driver_listing(*driver_listing(tmp_path, [gpu(0), gpu(2)]))
    env = {**os.environ, "HARNESS_PLATFORM": "cuda"}
    with pytest.raises(
        PlatformError, match="the driver lists the visible GPUs as .*, its management library"
    ):
        PendingPlatform("cuda", "CUDA_VISIBLE_DEVICES", env, listing).memory()
    fake = importlib.import_module("tests.fakes.pynvml")
    platforms._initialised.cache_clear()
    before = fake.init_calls
    masked = PendingPlatform("cuda", "CUDA_VISIBLE_DEVICES", {**env, "CUDA_VISIBLE_DEVICES": "5"}, listing)
    with pytest.raises(DeviceMaskError, match="index 5 is past the 2 device"):
        masked.uuids()
    assert fake.init_calls == before
