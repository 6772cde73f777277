"""One xdist worker per GPU: each worker pinned to its device through its mask, and what it records of it.

A worker's device mask must be in its environment before anything in it can initialise CUDA or HIP, and a
conftest may import torch (or vLLM) before any pytest hook of ours runs in the worker. So the controller
writes the mask into each worker's execnet spec (``env:NAME=value``): execnet sets it in the new process
before pytest starts there, and xdist restarts a crashed worker from the same spec, so the replacement gets
the crashed worker's device. ``workerinput`` carries the same pin, so the worker can check it and record
the device's UUID. The arithmetic (slots, masks, ``-n auto``) is ``harness.platform.slots``'.
"""

from __future__ import annotations

import os

import pytest

from harness.platform.slots import Slot, auto_workers, mask_variables, outer_mask, worker_slots
from harness.pytest_plugin.session import PLATFORM, process_context, worker_count, worker_id

PIN = "harness_pin"  # workerinput key: {"variables", "mask", "uuid"}


def _worker_slots(config: pytest.Config) -> list[Slot]:
    """The slots this session's workers are dealt from (device-major, ``workers_per_gpu`` each)."""
    here = process_context(config)
    return worker_slots(here.platform, here.settings.workers_per_gpu)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: see ``harness.platform.slots.auto_workers``."""
    here = process_context(config)
    return auto_workers(here.platform, here.settings)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Pin this worker's device (earliest hook); in the controller, check the worker count."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and PIN in workerinput:
        _pin(config, workerinput[PIN], workerinput["workerid"])
    elif workerinput is None:
        count = worker_count(config)
        if count and process_context(config).platform.mask_variable is not None:
            available = len(_worker_slots(config))
            if count > available:
                per_gpu = process_context(config).settings.workers_per_gpu
                raise pytest.UsageError(
                    f"-n {count} asks for more workers than the {available // per_gpu} visible GPU(s) "
                    f"× workers_per_gpu={per_gpu} allow; set workers_per_gpu in [tool.harness] to share GPUs"
                )


def _pin(config: pytest.Config, pin: dict, worker: str) -> None:
    """Make sure the worker's mask is set; it normally is already (the execnet spec put it there).

    When it was changed after torch initialised CUDA, the worker runs on the wrong device(s): every test
    then fails with that one line (a raise here would only show as xdist restarting a crashing worker).
    """
    changed = {name: value for name, value in pin["variables"].items() if os.environ.get(name) != value}
    if not changed:
        return
    from harness.platform import allocator  # a session that starts no runner loads no allocator module

    if allocator.initialised():
        shown = ", ".join(f"{name}={value}" for name, value in changed.items())
        config.pluginmanager.register(
            _Unpinned(
                f"worker {worker}: torch initialised CUDA before the harness could set {shown}; "
                "do not touch CUDA at import time in conftest.py or plugins"
            )
        )
        return
    os.environ.update(changed)


class _Unpinned:
    def __init__(self, message: str):
        self.message = message

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        pytest.fail(self.message, pytrace=False)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config: pytest.Config, specs: list) -> None:
    """Deal one slot to each worker through its execnet spec's ``env``, set before pytest starts there."""
    platform = process_context(config).platform
    for spec, slot in zip(specs, _worker_slots(config), strict=False):
        spec.env.update(mask_variables(platform, slot.mask))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Tell the worker its platform and pin; a replacement for a crashed worker inherits the crashed one's
    spec."""
    config = node.config
    platform = process_context(config).platform
    node.workerinput[PLATFORM] = platform.name
    if platform.mask_variable is None:
        return
    mask = node.gateway.spec.env.get(platform.mask_variable)
    slot = next(s for s in _worker_slots(config) if s.mask == mask)
    node.workerinput[PIN] = {
        "variables": mask_variables(platform, slot.mask),
        "mask": slot.mask,
        "uuid": slot.uuid,
    }


def worker_event(config: pytest.Config) -> dict:
    """Fields of the ledger's ``worker`` event: the physical device(s) this process uses, and its mask."""
    worker = worker_id(config)
    pin = getattr(config, "workerinput", {}).get(PIN)
    if pin is not None:
        return {"worker": worker, "devices": [pin["uuid"]], "mask": pin["mask"], "pid": os.getpid()}
    platform = process_context(config).platform
    if platform.mask_variable is None:
        return {"worker": worker, "devices": ["cpu"], "mask": None, "pid": os.getpid()}
    return {
        "worker": worker,
        "devices": platform.uuids(),
        "mask": outer_mask(platform)[1],
        "pid": os.getpid(),
    }
