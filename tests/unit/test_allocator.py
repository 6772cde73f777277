"""torch's caching allocator as the harness sees it, over a fake ``torch.cuda`` (what the H200 run showed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness import ledger
from harness.config.settings import load_settings
from harness.memory import admission
from harness.platform import allocator
from harness.platform.base import Device, MemoryReading, Platform
from harness.tracking import context, runs, starts
from tests.fakes.torch_cuda import GIB, FakeCuda, module

TOTAL = 80 * GIB
BASE = GIB // 2  # what the driver reserves before any process runs


@pytest.fixture
def cuda(monkeypatch):
    fake = FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", module(fake))
    return fake


class OneGpu(Platform):
    """An 80 GiB device whose used bytes are the driver's, this process's (the fake torch's) and those of
    other processes (``engines``: pid -> bytes, what NVML lists per process)."""

    name = "cuda"
    mask_variable = "CUDA_VISIBLE_DEVICES"

    def __init__(self, cuda: FakeCuda):
        self.cuda = cuda
        self.engines: dict[int, int] = {}

    def devices(self):
        return [Device(0, 0, "fake H100", "GPU-0", "0000:10:00.0", TOTAL)]

    def memory(self):
        return {0: MemoryReading(BASE + self.cuda.device_used() + sum(self.engines.values()), TOTAL)}

    def process_memory(self, pids):
        return {0: sum(used for pid, used in self.engines.items() if pid in pids)}


def test_without_torch_nothing_is_cached_or_initialised(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert not allocator.initialised()
    assert allocator.reserved(0) == 0
    allocator.empty_cache()  # no torch: nothing to do, nothing imported
    assert "torch" not in sys.modules


def test_torchs_xpu_allocator_is_read_and_emptied_as_cudas(monkeypatch):
    """On Intel GPUs torch keeps its blocks in ``torch.xpu``'s allocator, with the same calls."""
    xpu = FakeCuda()
    torch = module(FakeCuda())  # torch.cuda there, never initialised, as on an XPU host
    torch.xpu = xpu
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert not allocator.initialised()
    xpu.alloc(3 * GIB)
    xpu.free(2 * GIB)
    assert allocator.initialised() and allocator.reserved(0) == 3 * GIB
    allocator.empty_cache()
    assert xpu.cached == 0 and allocator.reserved(0) == GIB


def test_cached_blocks_of_a_torn_down_fixture_do_not_send_a_start_to_the_long_wait(cuda):
    """H200: a class fixture's 84 GiB stayed in torch's cache after teardown; the next start waited 240 s."""
    cuda.alloc(60 * GIB)
    cuda.free(60 * GIB)  # the fixture is gone, its blocks are cached
    waited = []
    admission.admit(
        "engine runner `own`",
        admission.Need((0,), 50 * GIB),
        holders=admission.Holders(),
        memory=OneGpu(cuda).memory,
        grace_s=0.2,
        wait=waited.append,
    )
    assert waited == []
    assert cuda.cached == 0


@pytest.fixture
def gpu(cuda):
    return OneGpu(cuda)


@pytest.fixture
def recording(gpu, tmp_path):
    here = context.Context(gpu, load_settings("cuda", None, env={}))
    here.writer = ledger.LedgerWriter(tmp_path, worker="main")
    replaced = context.use(here)
    yield tmp_path
    context.use(replaced)


def _hf_start(cuda: FakeCuda, model_bytes: int) -> runs.Run:
    with starts.starting("hf", "m", {"model": "m"}) as run:
        cuda.alloc(model_bytes)  # the load creates the context and puts the weights on the device
    return run


def _stopped(run: runs.Run, recording) -> list[dict]:
    run.stop()
    runs.check_released(wait_s=0)
    return ledger.read(recording).findings


def test_the_context_a_first_load_creates_is_not_a_leak(cuda, recording):
    run = _hf_start(cuda, 2 * GIB)
    cuda.free(2 * GIB)
    assert _stopped(run, recording) == []


def test_context_growth_after_the_start_is_not_a_leak(cuda, recording):
    """H200: a clean HF runner read as 0.70 GiB "not released": its context grew after the start."""
    run = _hf_start(cuda, 2 * GIB)
    cuda.first_use(int(0.7 * GIB))  # the first forward pass loads kernels, creates the cuBLAS handle
    cuda.free(2 * GIB)
    assert _stopped(run, recording) == []


def test_a_model_moved_to_the_gpu_after_its_recorded_load_is_not_a_leak(cuda, recording):
    """H200: 1.03 GiB "not released": HfRunner loaded on the CPU and moved the model to CUDA after the
    recorded load, so the whole CUDA context appeared after the start, and grew with the first forward."""
    with starts.starting("hf", "m", {"model": "m"}) as run:
        pass  # from_pretrained on the CPU: nothing on the device yet
    cuda.alloc(2 * GIB)  # .to("cuda") after the recorded load: the context and the weights appear now
    cuda.first_use(int(0.4 * GIB))
    cuda.free(2 * GIB)
    assert _stopped(run, recording) == []


def test_a_tensor_kept_past_the_stop_is_a_leak(cuda, recording):
    run = _hf_start(cuda, 2 * GIB)
    cuda.alloc(3 * GIB)  # leaked while the runner was alive
    cuda.free(2 * GIB)
    (finding,) = _stopped(run, recording)
    assert finding["type"] == "memory-not-released"
    assert "left 3.00 GiB on GPU-0" in finding["message"]


@pytest.fixture
def engines():
    """Real child processes standing in for vLLM engine cores (psutil finds them among the children)."""
    started: list[subprocess.Popen] = []
    yield started
    for child in started:
        child.kill()
        child.wait()


def _vllm_start(gpu: OneGpu, engines: list, engine_bytes: int) -> tuple[runs.Run, int]:
    with starts.starting("vllm", "m", {"model": "m"}, fraction=0.9) as run:
        engines.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        gpu.engines[engines[-1].pid] = engine_bytes  # the engine core, a child process, takes its share
    return run, engines[-1].pid


def test_an_engine_is_charged_with_its_process_not_with_this_process_context(cuda, gpu, recording, engines):
    """The HF reference in the same test creates this process's context while the engine is alive."""
    run, pid = _vllm_start(gpu, engines, 70 * GIB)
    (record,) = ledger.read(recording).records
    assert record["held_after_start"] == {"GPU-0": 70 * GIB}
    cuda.alloc(GIB)  # an HF model beside it: context and weights in this process
    cuda.free(GIB)
    del gpu.engines[pid]  # shutdown: the engine process exits
    assert _stopped(run, recording) == []


def test_an_engine_process_left_alive_after_the_stop_is_a_leak(gpu, recording, engines):
    run, _ = _vllm_start(gpu, engines, 70 * GIB)
    (finding,) = _stopped(run, recording)
    assert "left 70.00 GiB on GPU-0" in finding["message"]


def test_more_ranks_than_visible_devices_are_accounted_on_the_visible_ones(cuda, recording):
    """tensor_parallel_size=2 on a worker pinned to one GPU: recorded there, not a KeyError."""
    with starts.starting("vllm", "m", {"tensor_parallel_size": 2}, fraction=0.5, devices=(0, 1)) as run:
        cuda.alloc(GIB)
    (record,) = ledger.read(recording).records
    assert record["devices"] == ["GPU-0"] and record["need_bytes"] == TOTAL // 2
    assert run.devices == (0,)
