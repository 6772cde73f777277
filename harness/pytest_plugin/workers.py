"""pytest plugin glue: one xdist worker per GPU, the ``gpus(n)`` marker; the platform's test timeout.

A worker's device mask must be in its environment before anything in it can initialise CUDA or HIP, and a
conftest may import torch (or vLLM) before any pytest hook of ours runs in the worker. So the controller
writes the mask into each worker's execnet spec (``env:NAME=value``): execnet sets it in the new process
before pytest starts there, and xdist restarts a crashed worker from the same spec, so the replacement gets
the crashed worker's device. ``workerinput`` carries the same pin, so the worker can check it and record
the device's UUID.

An outer mask is respected: each worker gets the outer mask's own entry (``CUDA_VISIBLE_DEVICES=3,5`` →
``3`` and ``5``; UUIDs stay UUIDs). On ROCm, ``HIP_VISIBLE_DEVICES`` indexes into what
``ROCR_VISIBLE_DEVICES`` leaves, so an outer ROCR mask stays as it is and still agrees, and
``CUDA_VISIBLE_DEVICES`` gets the same value because vLLM raises when it differs from HIP's.
"""

from __future__ import annotations

import os
import sys
from typing import NamedTuple

import pytest

from harness.config.pyproject import find_pyproject
from harness.errors import HarnessError
from harness.platform import Platform
from harness.pytest_plugin.timeouts import default_timeout
from harness.tracking import context
from harness.tracking.context import Context

PIN = "harness_pin"  # workerinput key: {"variables", "mask", "uuid"}
PLATFORM = "harness_platform"  # workerinput key: the controller's platform name
_CONTEXT = pytest.StashKey[Context]()
_REPLACED = pytest.StashKey[Context | None]()
_NARROWED = pytest.StashKey[dict]()
_INVALID = pytest.StashKey[str]()


class Slot(NamedTuple):
    """One worker's share: the mask entry that selects its device, and that device's UUID."""

    mask: str
    uuid: str


def process_context(config: pytest.Config) -> Context:
    """This session's process context, from pytest's rootdir; the controller's platform choice is passed
    on to workers. The context it replaced comes back at unconfigure (a pytest run inside a test)."""
    if _CONTEXT not in config.stash:
        env = dict(os.environ)
        workerinput = getattr(config, "workerinput", {})
        if PLATFORM in workerinput:
            env["HARNESS_PLATFORM"] = workerinput[PLATFORM]
        try:
            built = context.build(find_pyproject(config.rootpath), env)
        except HarnessError as error:
            raise pytest.UsageError(str(error)) from None
        config.stash[_REPLACED] = context.use(built)
        config.stash[_CONTEXT] = built
    return config.stash[_CONTEXT]


def listed(config: pytest.Config) -> Platform:
    """This session's platform with its devices listed. A forced GPU platform lists them when needed
    (``detect_later``), so what stops that listing (no NVML, a bad mask) is raised here, as a usage error."""
    return _asked(process_context(config).platform.ready)


def visible_uuids(config: pytest.Config) -> list[str]:
    """This session's visible devices' UUIDs, which a forced cuda platform names from the driver's list,
    without NVML; what stops that (a bad mask, no NVML where the driver lists none) is a usage error."""
    return _asked(process_context(config).platform.uuids)


def _asked(question):
    """``question()``; a ``HarnessError`` it raises is the session's usage error."""
    try:
        return question()
    except HarnessError as error:
        raise pytest.UsageError(str(error)) from None


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if _CONTEXT in config.stash:
        context.use(config.stash[_REPLACED])


def outer_mask(platform_name: str, env=os.environ) -> tuple[str, str | None]:
    """(variable, value) of the mask the runtime indexes visible devices by; HIP falls back to CUDA's."""
    if platform_name == "rocm" and "HIP_VISIBLE_DEVICES" not in env:
        return "CUDA_VISIBLE_DEVICES", env.get("CUDA_VISIBLE_DEVICES")
    variable = "HIP_VISIBLE_DEVICES" if platform_name == "rocm" else "CUDA_VISIBLE_DEVICES"
    return variable, env.get(variable)


def slots(platform, env=os.environ) -> list[Slot]:
    """One slot per visible device, in visible order; the outer mask's own entries when there is one."""
    devices = platform.devices()
    _, value = outer_mask(platform.name, env)
    entries = [entry.strip() for entry in value.split(",")] if value else [str(d.index) for d in devices]
    return [Slot(entry, device.uuid) for entry, device in zip(entries, devices, strict=False)]


def mask_variables(platform_name: str, mask: str) -> dict[str, str]:
    """What a worker pinned to ``mask`` sets: HIP and CUDA agree on ROCm (vLLM checks that they do)."""
    if platform_name == "rocm":
        return {"HIP_VISIBLE_DEVICES": mask, "CUDA_VISIBLE_DEVICES": mask}
    return {"CUDA_VISIBLE_DEVICES": mask}


def _worker_slots(config: pytest.Config) -> list[Slot]:
    """The slots workers are dealt from, each device repeated ``workers_per_gpu`` times (device-major)."""
    if process_context(config).platform.mask_variable is None:
        return []
    per_gpu = process_context(config).settings.workers_per_gpu
    return [slot for slot in slots(listed(config)) for _ in range(per_gpu)]


def auto_workers(platform, settings, env=os.environ) -> int | None:
    """What ``-n auto`` resolves to: one worker per visible GPU (× ``workers_per_gpu``), ``cpu_workers``
    on the CPU; None when the user's ``PYTEST_XDIST_AUTO_NUM_WORKERS`` decides (xdist's own hook reads it)."""
    if env.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    if platform.mask_variable is None:
        return settings.cpu_workers
    return len(slots(platform, env)) * settings.workers_per_gpu


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: see ``auto_workers``."""
    return auto_workers(listed(config), process_context(config).settings)


def is_controller(config: pytest.Config) -> bool:
    """The xdist controller: it runs no tests, its workers do (``-n``, or ``--tx`` with ``--dist``)."""
    return not hasattr(config, "workerinput") and _worker_count(config) > 0


def _worker_count(config: pytest.Config) -> int:
    """How many workers xdist will start (0 without distribution); ``-n auto`` is resolved by now."""
    if getattr(config.option, "dist", "no") == "no" or not getattr(config.option, "tx", None):
        return 0
    from xdist.workermanage import parse_tx_spec_config

    return len(parse_tx_spec_config(config))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Pin this worker's device (earliest hook), check the worker count, default the test timeout."""
    config.addinivalue_line("markers", "gpus(n): the test needs n GPUs; it runs in the multi-GPU phase")
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and PIN in workerinput:
        _pin(config, workerinput[PIN], workerinput["workerid"])
    elif workerinput is None:
        count = _worker_count(config)
        if count and process_context(config).platform.mask_variable is not None:
            available = len(_worker_slots(config))
            if count > available:
                per_gpu = process_context(config).settings.workers_per_gpu
                raise pytest.UsageError(
                    f"-n {count} asks for more workers than the {available // per_gpu} visible GPU(s) "
                    f"× workers_per_gpu={per_gpu} allow; set workers_per_gpu in [tool.harness] to share GPUs"
                )
    here = process_context(config)
    default_timeout(config, here.settings.test_timeout_s, here.owner)


def _pin(config: pytest.Config, pin: dict, worker: str) -> None:
    """Make sure the worker's mask is set; it normally is already (the execnet spec put it there).

    When it was changed after torch initialised CUDA, the worker runs on the wrong device(s): every test
    then fails with that one line (a raise here would only show as xdist restarting a crashing worker).
    """
    changed = {name: value for name, value in pin["variables"].items() if os.environ.get(name) != value}
    if not changed:
        return
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
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
    name = process_context(config).platform.name
    for spec, slot in zip(specs, _worker_slots(config), strict=False):
        spec.env.update(mask_variables(name, slot.mask))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Tell the worker its pin; a replacement for a crashed worker inherits the crashed one's spec."""
    config = node.config
    platform = process_context(config).platform
    node.workerinput[PLATFORM] = platform.name
    if platform.mask_variable is None:
        return
    mask = node.gateway.spec.env.get(platform.mask_variable)
    slot = next(s for s in _worker_slots(config) if s.mask == mask)
    node.workerinput[PIN] = {
        "variables": mask_variables(platform.name, slot.mask),
        "mask": slot.mask,
        "uuid": slot.uuid,
    }


def worker_id(config: pytest.Config) -> str:
    """``gw0``... in an xdist worker, ``main`` elsewhere.

    From the session, not from ``PYTEST_XDIST_WORKER``: a pytest started from inside a worker inherits
    that variable without being a worker.
    """
    return config.workerinput["workerid"] if hasattr(config, "workerinput") else "main"


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
        "devices": visible_uuids(config),
        "mask": outer_mask(platform.name)[1],
        "pid": os.getpid(),
    }


def _visible_gpus(config: pytest.Config) -> int:
    platform = listed(config)
    return 0 if platform.mask_variable is None else len(platform.devices())


def _carrying(items: list[pytest.Item], names: frozenset[str]) -> list[pytest.Item]:
    """The items with a marker of one of ``names`` on themselves or a parent node, each parent looked at
    once: ``get_closest_marker`` on every item walks every parent every time, a cost on thousands of tests
    when none of them is marked. Only parents are remembered: each item is looked at once anyway."""
    seen: dict[int, bool] = {}

    def own(node) -> bool:
        return any(m.name in names for m in node.own_markers)

    def marked(node) -> bool:
        if node is None:
            return False
        if id(node) not in seen:
            seen[id(node)] = own(node) or marked(node.parent)
        return seen[id(node)]

    return [item for item in items if own(item) or marked(item.parent)]


def _distributed_as_gpus(items: list[pytest.Item]) -> None:
    """vLLM's ``distributed(num_gpus=n)`` counts as ``gpus(n)`` (vLLM's ``multi_gpu_marks`` set it)."""
    for item in items:
        marker = item.get_closest_marker("distributed")
        if marker is not None and item.get_closest_marker("gpus") is None and "num_gpus" in marker.kwargs:
            item.add_marker(pytest.mark.gpus(marker.kwargs["num_gpus"]))


def _needed(item: pytest.Item) -> int | None:
    marker = item.get_closest_marker("gpus")
    if marker is None:
        return None
    count = marker.args[0] if len(marker.args) == 1 and not marker.kwargs else None
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise pytest.UsageError(f"{item.nodeid}: the gpus marker takes one positive integer, as in gpus(2)")
    return count


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpus(n)`` tests this process cannot serve, saying how many GPUs they need and see.

    First, before ``-m`` deselects, so the multi-GPU phase (``-m gpus``) takes vLLM's tests as marked.
    """
    marked = _carrying(items, frozenset(("gpus", "distributed")))
    _distributed_as_gpus(marked)
    needing = []
    for item in marked:
        try:
            count = _needed(item)
        except pytest.UsageError as error:
            if not hasattr(config, "workerinput"):
                raise
            # an xdist worker cannot end the session with a usage error (xdist reports an INTERNALERROR)
            item.stash[_INVALID] = str(error)
            if not config.pluginmanager.has_plugin("harness-invalid"):
                config.pluginmanager.register(_Invalid(), "harness-invalid")
            continue
        if count is not None:
            needing.append((item, count))
    if not needing:
        return
    visible = _visible_gpus(config)
    serial = not hasattr(config, "workerinput")
    narrowed = False
    for item, count in needing:
        if count > visible:
            item.add_marker(pytest.mark.skip(reason=f"needs {count} GPUs, {visible} visible"))
        elif serial and count < visible:
            platform = listed(config)
            mask = ",".join(slot.mask for slot in slots(platform)[:count])
            item.stash[_NARROWED] = mask_variables(platform.name, mask)
            narrowed = True
    if narrowed and not config.pluginmanager.has_plugin("harness-narrowing"):
        config.pluginmanager.register(_Narrowing(), "harness-narrowing")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """A forced GPU platform's devices are named by now, before any test runs; a failure ends the session."""
    visible_uuids(session.config)


class _Invalid:
    """Under xdist, a test with a malformed ``gpus`` marker fails with the message a serial run stops on.

    Registered only when such a test was collected, so other runs pay nothing per test.
    """

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        message = item.stash.get(_INVALID, None)
        if message is not None:
            pytest.fail(message, pytrace=False)


class _Narrowing:
    """A ``gpus(n)`` test run serially sees its first n devices only (engines it spawns inherit that).

    Registered only when such a test was collected, so other runs pay nothing per test.
    """

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        narrowed = item.stash.get(_NARROWED, None)
        if narrowed is None:
            return (yield)
        saved = {name: os.environ.get(name) for name in narrowed}
        os.environ.update(narrowed)
        try:
            return (yield)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
