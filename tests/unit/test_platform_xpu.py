"""Intel GPUs (vLLM's xpu platform) over a fake ``torch.xpu``: detection, bytes, ZE_AFFINITY_MASK, one
worker per device, and the parking rule of vLLM's conftest there."""

from __future__ import annotations

import os
import types

import pytest

from harness.config.settings import load_settings
from harness.platform import detect
from harness.platform.intel import XpuPlatform, uuid_text
from harness.platform.slots import mask_variables, outer_mask, worker_slots
from harness.tracking import context
from harness.tracking.vllm.parking import unparkable
from tests.fakes import gpu

GIB = 2**30


def max1550(number: int, used: int = 0) -> dict:
    return gpu(number, total=128 * GIB, used=used, name="Intel(R) Data Center GPU Max 1550")


@pytest.fixture
def xpus(fake_gpus):
    def machine(count: int, **env: str):
        fake_gpus([max1550(n, used=n * GIB + 7) for n in range(count)], vendor="intel")
        os.environ.update(env)
        return detect(dict(os.environ))

    return machine


def test_torch_xpu_with_devices_is_the_xpu_platform_in_bytes(xpus):
    detection = xpus(2)
    platform = detection.platform
    assert isinstance(platform, XpuPlatform) and platform.name == "xpu"
    assert detection.reason == "torch.xpu answered: 2 XPU(s) (tests.fakes.torch_xpu.xpu)"
    first = platform.devices()[0]
    assert (first.name, first.total_bytes) == ("Intel(R) Data Center GPU Max 1550", 128 * GIB)
    assert first.uuid == gpu(0)["uuid"].removeprefix("GPU-")  # torch's 16 bytes, as text
    readings = platform.memory()
    assert {i: (r.used_bytes, r.total_bytes) for i, r in readings.items()} == {
        0: (7, 128 * GIB),
        1: (GIB + 7, 128 * GIB),
    }
    assert platform.process_memory({os.getpid()}) == {}  # torch counts no process's share


def test_the_runtime_applies_ze_affinity_mask_and_its_entries_name_the_physical_devices(xpus):
    platform = xpus(4, ZE_AFFINITY_MASK="3,1").platform
    assert [(d.index, d.physical) for d in platform.devices()] == [(0, 3), (1, 1)]
    assert platform.memory()[0].used_bytes == 3 * GIB + 7
    assert outer_mask(platform) == ("ZE_AFFINITY_MASK", "3,1")
    # each worker gets the outer mask's own entry, set in Level Zero's variable only
    assert [slot.mask for slot in worker_slots(platform, 1)] == ["3", "1"]
    assert mask_variables(platform, "3") == {"ZE_AFFINITY_MASK": "3"}


def test_forced_xpu_without_it_is_one_line(fake_gpus):
    fake_gpus([], vendor="intel")
    env = {**os.environ, "HARNESS_PLATFORM": "xpu"}
    with pytest.raises(Exception, match=r"HARNESS_PLATFORM=xpu but torch.xpu does not answer"):
        detect(env)


def test_without_an_intel_gpu_driver_torch_is_not_imported(tmp_path, monkeypatch):
    """On a CPU host detection must not pay for importing torch."""
    from harness.platform import _xpu

    for variable in ("HARNESS_XPU_MODULE", "HARNESS_PLATFORM"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr("harness.platform._intel_gpu", lambda drm="": False)
    monkeypatch.setattr("importlib.import_module", lambda name: pytest.fail(f"imported {name}"))
    assert _xpu({}, probe=True) == (None, 0, "no Intel GPU driver (i915, xe) bound")


def test_intel_gpu_probe_reads_the_drm_drivers(tmp_path):
    from harness.platform import _intel_gpu

    for card, driver in (("card0", "ast"), ("card1", "xe"), ("renderD128", "xe")):
        (tmp_path / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        (tmp_path / "drm" / card / "device").mkdir(parents=True)
        (tmp_path / "drm" / card / "device" / "driver").symlink_to(tmp_path / "drivers" / driver)
    assert _intel_gpu(str(tmp_path / "drm"))
    (tmp_path / "drm" / "card1" / "device" / "driver").unlink()
    assert not _intel_gpu(str(tmp_path / "drm"))  # a render node alone is not a card; ast is a BMC's


def test_settings_settle_memory_on_xpu_as_on_rocm():
    assert load_settings("xpu", env={}).settle and load_settings("rocm", env={}).settle
    assert not load_settings("cuda", env={}).settle


def test_uuid_text_reads_bytes_and_strings():
    assert uuid_text(list(range(16))) == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert uuid_text("GPU-abc") == "GPU-abc"
    assert uuid_text(b"short") is None and uuid_text(None) is None


class LLM:
    """What the adapter reads of a ``vllm.LLM`` before parking: a multiprocess client, its config, no stats
    (an XPU engine cannot start here; the rule depends on the platform alone)."""

    def __init__(self):
        client = type("SyncMPClient", (), {})()
        self.llm_engine = types.SimpleNamespace(engine_core=client, vllm_config=object(), log_stats=False)


def engine_shaped() -> LLM:
    return LLM()


@pytest.mark.parametrize(
    ("vendor", "refused"),
    [
        ("intel", "vLLM's conftest waits on XPU for its memory to be given back after each runner"),
        ("amd", "vLLM's conftest waits on ROCm for its memory to be given back after each runner"),
        ("nvidia", None),
    ],
)
def test_a_suites_engine_is_not_parked_where_vllms_conftest_waits_for_memory(fake_gpus, vendor, refused):
    fake_gpus([max1550(0)], vendor=vendor)
    platform = detect(dict(os.environ)).platform
    previous = context.use(context.Context(platform, load_settings(platform.name, env={})))
    try:
        assert unparkable(engine_shaped(), own=False) == refused
        assert unparkable(engine_shaped(), own=True) is None  # the harness's runner makes room first
    finally:
        context.use(previous)
