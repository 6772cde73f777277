"""Engines over several devices (tensor parallel) on a fake two-GPU machine (fake NVML, real processes).

A TP=2 engine declares its fraction of each of its devices: it is blocked where a live engine's share
leaves no room on one of them (naming the holder and the device), and admitted where each device has room,
however the shares of the engines on the other devices add up. What it holds is charged per device, from
what NVML lists for its own processes there.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from harness import ledger
from harness.config.settings import load_settings
from harness.errors import RunnerBlocked
from harness.platform.nvidia import NvidiaPlatform
from harness.tracking import context, runs, starts
from tests.fakes import gpu, write

GIB = 2**30
TOTAL = 80 * GIB


class Machine:
    """The fake file NVML reads: device memory and, per device, what each engine process uses."""

    def __init__(self, path):
        self.path = path
        self.devices = [gpu(0, total=TOTAL), gpu(1, total=TOTAL)]
        self.write()

    def write(self) -> None:
        write(self.path, self.devices)

    def engine(self, pid: int, per_device: dict[int, int]) -> None:
        for index, used in per_device.items():
            self.devices[index].setdefault("processes", {})[str(pid)] = used
            self.devices[index]["used"] += used
        self.write()

    def uuid(self, index: int) -> str:
        return self.devices[index]["uuid"]


@pytest.fixture
def machine(fake_gpus, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no pyproject of the repository's above
    path = fake_gpus([])
    nvml = importlib.import_module("tests.fakes.pynvml")
    fake = Machine(path)
    nvml.nvmlInit()
    here = context.Context(NvidiaPlatform(nvml, {}), load_settings("cuda", None, env={}))
    here.writer = ledger.LedgerWriter(tmp_path / "ledger", worker="gw0")
    here.owner.enter_test("t.py::test_tp", "t.py")
    replaced = context.use(here)
    yield fake
    context.use(replaced)


@pytest.fixture
def engines():
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def _start(machine, engines, devices, fraction, per_device):
    """A vLLM start over ``devices`` whose engine process (a real child) takes ``per_device`` bytes."""
    config = {"model": "m", "tensor_parallel_size": len(devices)}
    with starts.starting("vllm", "m", config, fraction=fraction, devices=devices) as run:
        engines.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        machine.engine(engines[-1].pid, per_device)
    return run


def test_a_tp2_start_beside_a_one_device_engine_is_blocked_naming_the_holder_and_the_device(machine, engines):
    _start(machine, engines, (0,), 0.6, {0: 48 * GIB})
    with pytest.raises(RunnerBlocked) as blocked:
        _start(machine, engines, (0, 1), 0.6, {0: 48 * GIB, 1: 48 * GIB})
    message = str(blocked.value)
    assert "on device 0" in message and "declared 0.6" in message, message
    assert "held by vllm runner `m`" in message and "started in t.py::test_tp" in message, message


def test_a_tp2_start_fits_where_each_device_has_room(machine, engines):
    """0.4 on GPU 0 and 0.4 on GPU 1 leave 0.6 of each: a TP=2 engine at 0.5 fits (0.9 per device)."""
    _start(machine, engines, (0,), 0.4, {0: 32 * GIB})
    _start(machine, engines, (1,), 0.4, {1: 32 * GIB})
    run = _start(machine, engines, (0, 1), 0.5, {0: 40 * GIB, 1: 40 * GIB})
    assert run is not None and run.devices == (0, 1)


def test_a_tp2_engine_is_charged_per_device_with_its_own_processes(machine, engines, tmp_path):
    run = _start(machine, engines, (0, 1), 0.5, {0: 30 * GIB, 1: 20 * GIB})
    (record,) = ledger.read(tmp_path / "ledger").records
    assert record["devices"] == [machine.uuid(0), machine.uuid(1)]
    assert record["held_after_start"] == {machine.uuid(0): 30 * GIB, machine.uuid(1): 20 * GIB}
    run.stop()  # its processes still hold their memory: a finding per device, each with its own bytes
    runs.check_released(wait_s=0.2)
    messages = sorted(f["message"] for f in ledger.read(tmp_path / "ledger").findings)
    assert len(messages) == 2, messages
    assert f"left 30.00 GiB on {machine.uuid(0)}" in messages[0] + messages[1]
    assert f"left 20.00 GiB on {machine.uuid(1)}" in messages[0] + messages[1]
