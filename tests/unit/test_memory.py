"""wait_for_memory and settle over fake devices, with a fake clock: the real loop, no sleeping."""

import importlib
import re

import pytest

from harness.config.settings import load_settings
from harness.errors import MemoryTimeout, PlatformError
from harness.memory.waits import settle, wait_for_memory
from harness.platform.amd import AmdPlatform
from harness.platform.host import HostPlatform
from harness.platform.nvidia import NvidiaPlatform
from tests.fakes import gpu, write

GIB = 2**30


@pytest.fixture(autouse=True)
def _away_from_the_repo_pyproject(tmp_path, monkeypatch):
    """pyproject=None looks upwards from the current directory; keep the repo's own table out of it."""
    monkeypatch.chdir(tmp_path)


class Clock:
    """Time that moves only when the code under test sleeps; ``on_sleep`` lets memory change meanwhile."""

    def __init__(self, on_sleep=None):
        self.now = 100.0
        self.sleeps = []
        self.on_sleep = on_sleep or (lambda now: None)

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds
        self.on_sleep(self.now - 100.0)


def releasing(path, devices, schedule):
    """Rewrite the fake machine as time passes: ``schedule`` maps elapsed seconds → used bytes of device 0."""

    def on_sleep(elapsed):
        for at, used in sorted(schedule.items()):
            if elapsed >= at:
                devices[0]["used"] = used
        write(path, devices)

    return on_sleep


@pytest.fixture
def cuda(fake_gpus):
    def machine(devices):
        path = fake_gpus(devices)
        nvml = importlib.import_module("tests.fakes.pynvml")
        nvml.nvmlInit()
        return NvidiaPlatform(nvml, {}), path

    return machine


@pytest.fixture
def rocm(fake_gpus):
    def machine(devices, bytes_api=True):
        path = fake_gpus(devices, vendor="amd")
        amdsmi = importlib.import_module("tests.fakes.amdsmi")
        amdsmi.amdsmi_init()
        return AmdPlatform(amdsmi, {}), path

    return machine


def test_returns_at_once_when_already_under(cuda):
    platform, _ = cuda([gpu(0, used=GIB)])
    clock = Clock()
    assert (
        wait_for_memory(platform, [0], threshold_bytes=2 * GIB, timeout_s=10, clock=clock, sleep=clock.sleep)
        == 0
    )
    assert clock.sleeps == []


def test_waits_until_memory_is_released(cuda):
    devices = [gpu(0, used=40 * GIB)]
    platform, path = cuda(devices)
    clock = Clock(releasing(path, devices, {3.0: GIB}))
    waited = wait_for_memory(
        platform, [0], threshold_bytes=2 * GIB, timeout_s=60, poll_s=1.0, clock=clock, sleep=clock.sleep
    )
    assert waited == 3.0
    assert clock.sleeps == [1.0, 1.0, 1.0]


def test_stable_requires_the_figure_to_stay_under(cuda):
    devices = [gpu(0, used=40 * GIB)]
    platform, path = cuda(devices)
    # under at 2 s, back over at 3 s (another allocation), under again from 5 s
    clock = Clock(releasing(path, devices, {2.0: GIB, 3.0: 30 * GIB, 5.0: GIB}))
    waited = wait_for_memory(
        platform, [0], threshold_bytes=2 * GIB, timeout_s=60, stable_s=2.0, clock=clock, sleep=clock.sleep
    )
    assert waited == 7.0


def test_ratio_threshold_is_of_each_device_total(cuda):
    platform, _ = cuda([gpu(0, total=80 * GIB, used=7 * GIB), gpu(1, total=40 * GIB, used=5 * GIB)])
    clock = Clock()
    assert (
        wait_for_memory(platform, [0], threshold_ratio=0.1, timeout_s=5, clock=clock, sleep=clock.sleep) == 0
    )
    with pytest.raises(MemoryTimeout, match=r"device 1 used 5.00 GiB of 40.00 GiB \(threshold 4.00 GiB\)"):
        wait_for_memory(platform, [1], threshold_ratio=0.1, timeout_s=5, clock=clock, sleep=clock.sleep)


def test_per_device_thresholds(cuda):
    platform, _ = cuda([gpu(0, used=3 * GIB), gpu(1, used=10 * GIB)])
    clock = Clock()
    assert (
        wait_for_memory(
            platform,
            [0, 1],
            per_device={0: 4 * GIB, 1: 12 * GIB},
            timeout_s=5,
            clock=clock,
            sleep=clock.sleep,
        )
        == 0
    )
    with pytest.raises(MemoryTimeout, match=r"^memory of devices \[1\]"):
        wait_for_memory(platform, [1], per_device={1: 9 * GIB}, timeout_s=5, clock=clock, sleep=clock.sleep)


def test_timeout_message_names_devices_figures_threshold_and_seconds(cuda):
    platform, _ = cuda([gpu(0, total=80 * GIB, used=30 * GIB), gpu(1, total=80 * GIB, used=GIB)])
    clock = Clock()
    with pytest.raises(MemoryTimeout) as error:
        wait_for_memory(
            platform,
            [0, 1],
            threshold_bytes=4 * GIB,
            timeout_s=240,
            poll_s=1.0,
            stable_s=2.0,
            clock=clock,
            sleep=clock.sleep,
        )
    assert str(error.value) == (
        "memory of devices [0, 1] not under threshold for 2 s after 240.00 s: "
        "device 0 used 30.00 GiB of 80.00 GiB (threshold 4.00 GiB), "
        "device 1 used 1.00 GiB of 80.00 GiB (threshold 4.00 GiB)"
    )
    assert len(clock.sleeps) == 240


def test_unlisted_devices_are_not_waited_for(cuda):
    platform, _ = cuda([gpu(0, used=GIB), gpu(1, used=70 * GIB)])
    clock = Clock()
    assert (
        wait_for_memory(platform, [0], threshold_bytes=2 * GIB, timeout_s=5, clock=clock, sleep=clock.sleep)
        == 0
    )


def test_invisible_device_is_a_platform_error(cuda):
    platform, _ = cuda([gpu(0)])
    with pytest.raises(PlatformError, match=r"devices \[3\] are not visible here \(visible: \[0\]\)"):
        wait_for_memory(platform, [3], threshold_bytes=1, timeout_s=1, sleep=lambda s: None)


def test_exactly_one_threshold():
    with pytest.raises(ValueError, match="exactly one"):
        wait_for_memory(HostPlatform(), [0], threshold_bytes=1, threshold_ratio=0.5, timeout_s=1)


@pytest.mark.parametrize("bytes_api", ["1", "0"])
def test_amd_wait_cannot_pass_on_mib_figures(rocm, monkeypatch, bytes_api):
    """vLLM's bug: 30 GiB used read as 30720 'bytes' from the MiB call is under any byte threshold."""
    monkeypatch.setenv("FAKE_AMDSMI_BYTES_API", bytes_api)
    platform, _ = rocm([gpu(0, total=192 * GIB, used=30 * GIB, name="AMD Instinct MI300X")])
    clock = Clock()
    with pytest.raises(MemoryTimeout, match=r"device 0 used 30.00 GiB of 192.00 GiB"):
        wait_for_memory(platform, [0], threshold_bytes=4 * GIB, timeout_s=10, clock=clock, sleep=clock.sleep)


def test_settle_is_a_no_op_on_cuda_and_cpu(cuda):
    platform, _ = cuda([gpu(0, used=70 * GIB)])
    for name in ("cuda", "cpu"):
        settings = load_settings(name, pyproject=None, env={})
        assert settle(platform, settings, sleep=pytest.fail) == 0.0
    assert settle(HostPlatform(), load_settings("cpu", env={}), sleep=pytest.fail) == 0.0


def test_settle_on_rocm_waits_for_the_floor_not_for_zero(rocm):
    """The driver keeps ~2.5 GiB after release: under the 4 GiB floor is settled, stable for 2 s."""
    devices = [gpu(0, total=64 * GIB, used=40 * GIB, name="AMD Instinct MI210")]
    platform, path = rocm(devices)
    clock = Clock(releasing(path, devices, {4.0: int(2.5 * GIB)}))
    settings = load_settings("rocm", env={})
    assert settle(platform, settings, clock=clock, sleep=clock.sleep) == 6.0  # under at 4 s, stable 2 s


def test_settle_on_rocm_uses_the_ratio_when_above_the_floor(rocm):
    devices = [gpu(0, total=192 * GIB, used=9 * GIB, name="AMD Instinct MI300X")]
    platform, _ = rocm(devices)
    clock = Clock()
    # 5 % of 192 GiB = 9.6 GiB > 4 GiB floor: 9 GiB is settled.
    assert settle(platform, load_settings("rocm", env={}), clock=clock, sleep=clock.sleep) == 2.0


def test_settle_times_out_with_the_figures(rocm):
    platform, _ = rocm([gpu(0, total=64 * GIB, used=10 * GIB, name="AMD Instinct MI210")])
    clock = Clock()
    settings = load_settings("rocm", env={"HARNESS_SETTLE_TIMEOUT_S": "30"})
    with pytest.raises(MemoryTimeout) as error:
        settle(platform, settings, clock=clock, sleep=clock.sleep)
    assert re.search(
        r"after 30.00 s: device 0 used 10.00 GiB of 64.00 GiB \(threshold 4.00 GiB\)", str(error.value)
    )


def test_settle_configured_on_cuda(cuda):
    devices = [gpu(0, used=10 * GIB)]
    platform, path = cuda(devices)
    clock = Clock(releasing(path, devices, {1.0: GIB}))
    settings = load_settings("cuda", env={"HARNESS_SETTLE": "1", "HARNESS_SETTLE_STABLE_S": "0"})
    assert settle(platform, settings, clock=clock, sleep=clock.sleep) == 1.0
