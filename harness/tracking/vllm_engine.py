"""The one module that reaches into vLLM internals: how a live ``vllm.LLM`` engine is stopped, parked for
reuse, reset and released."""

from __future__ import annotations

import functools
import gc
import os
import threading
import weakref
from collections.abc import Callable

from harness.memory.waits import settle
from harness.platform import allocator
from harness.tracking.context import current
from harness.tracking.starts import Run

_own = threading.local()  # the harness's own VllmRunner is closing: vLLM's conftest waits do not follow
_stops: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # LLM -> its engine's real stop


def watch_engine(llm, run: Run) -> None:
    """vLLM 0.32's LLM has no shutdown: callers stop ``llm.llm_engine.engine_core`` or drop the LLM.

    Both end in the engine-core client's ``shutdown``; wrapping it on the instance records explicit
    stops, and a finalizer on the LLM shuts the client down (idempotent in vLLM) and records the stop.
    With reuse on, an explicit ``shutdown`` (vLLM's ``VllmRunner.__exit__``, the harness's ``close``)
    parks the engine in the pool instead, unless the pool refuses it.
    A vLLM without those internals falls back to the LLM's lifetime, with a finding saying so: the
    user's ``LLM(...)`` has already built a working engine and must not raise here.
    """

    reference = weakref.ref(llm)

    def shutdown(*args, **kwargs):
        engine = reference()
        if engine is not None and _park(engine, functools.partial(stop, *args, **kwargs)):
            return None
        return stop(*args, **kwargs)

    try:
        client = llm.llm_engine.engine_core
        stop = run.stopping(client.shutdown)
        client.shutdown = shutdown
    except AttributeError as error:
        run.watch(llm)
        run.writer.write(
            "finding",
            type="not-tracked",
            runner=run.id,
            test=run.owner.test,
            message=f"vllm.LLM internals moved ({error}): the stop of {run.label()} is recorded when the "
            "LLM is collected, not when its engine shuts down",
        )
        return
    _stops[llm] = stop
    weakref.finalize(llm, stop).atexit = False


def close(llm, timeout: float | None) -> bool:
    """The harness's own runner closes ``llm``: parked (True) or shut down (False)."""
    _own.active = True
    try:
        llm.llm_engine.engine_core.shutdown(timeout=timeout)
    finally:
        _own.active = False
    pool = current().pool
    return pool is not None and pool.holds(llm)


def _park(llm, stop: Callable[[], object]) -> bool:
    """Park ``llm`` in the reuse pool instead of stopping it; False when there is no pool or it refuses.

    The pool stops a parked engine later with ``stop``, the shutdown its owner asked for.
    """
    pool = current().pool
    if pool is None:
        return False
    if pool.holds(llm):  # stopped again while parked: its owner means it
        pool.drop(llm)
        return False
    began = pool.started.get(llm)
    return pool.park(
        began.key if began is not None else "",
        llm,
        fresh=False,
        reset=reset,
        state=state,
        shutdown=lambda _: stop(),
        release=release,
        refused=_unparkable(llm),
    )


def _unparkable(llm) -> str | None:
    """Why an engine may not be parked at all, whatever its state; None when it may.

    An engine running in this process is torn down by what vLLM's conftest runs after ``shutdown``
    (``cleanup_dist_env_and_memory``). vLLM's conftest waits for memory after ``__exit__`` and before the
    next ``LLM(...)`` on ROCm (used below ``1 - gpu_memory_utilization``, for up to 240 s), and between
    tests on any GPU with ``VLLM_TEST_CLEAN_GPU_MEMORY=1`` (below 10 %): a parked engine's memory would
    hold those waits, so there the harness's own runner parks and a suite's own runner does not.
    """
    try:
        in_process = not type(llm.llm_engine.engine_core).__name__.endswith("MPClient")
        llm.llm_engine.vllm_config  # noqa: B018 (what reset and state read)
    except AttributeError as error:
        return f"vllm.LLM internals moved ({error})"
    if in_process:
        return "its engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0): cleanup would end it"
    if getattr(_own, "active", False):
        return None
    platform = current().platform.name
    if platform == "rocm":
        return "vLLM's conftest waits on ROCm for its memory to be given back after each runner"
    if platform != "cpu" and os.environ.get("VLLM_TEST_CLEAN_GPU_MEMORY") == "1":
        return "VLLM_TEST_CLEAN_GPU_MEMORY=1: vLLM's conftest waits between tests for a nearly empty GPU"
    return None


def release() -> None:
    """After an engine is stopped and dropped: collect, empty caches, clean vLLM's distributed state, and
    on ROCm wait for the driver to give memory back (what a runner's own teardown does after a stop)."""
    gc.collect()
    allocator.empty_cache()
    try:
        from vllm.distributed import cleanup_dist_env_and_memory
    except ImportError:  # a vLLM that moved it: the collection above is what is left to do
        pass
    else:
        cleanup_dist_env_and_memory()
    context = current()
    settle(context.platform, context.settings)


def state(llm) -> str:
    """What the engine runs with as the engine itself sees it; a test that changes it changes this text
    ("" where vLLM keeps no ``vllm_config`` there: parking is then refused, see ``_unparkable``)."""
    try:
        return str(llm.llm_engine.vllm_config)
    except AttributeError:
        return ""


def reset(llm) -> str | None:
    """Undo what a test may leave in a live engine; the reason it cannot be handed on, or None.

    Wakes a sleeping engine, removes LoRA adapters, empties the prefix cache and forgets the cached
    default sampling parameters (they are read again from the model's generation config). Each only where
    the engine has the feature: vLLM raises on ``list_loras`` without LoRA.
    """
    engine = llm.llm_engine
    config = engine.vllm_config
    try:
        if config.model_config.enable_sleep_mode and engine.is_sleeping() and not llm.wake_up():
            return "it was left asleep and did not wake up fully"
        for adapter in sorted(engine.list_loras()) if config.lora_config is not None else ():
            if not engine.remove_lora(adapter):
                return f"LoRA adapter {adapter} could not be removed"
        if config.cache_config.enable_prefix_caching and not llm.reset_prefix_cache():
            return "its prefix cache could not be reset (requests still running)"
    except Exception as error:  # an engine that fails here is not one to hand on
        return f"resetting it failed: {type(error).__name__}: {error}"
    llm.default_sampling_params = None
    return None
