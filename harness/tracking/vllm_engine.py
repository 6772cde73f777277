"""The one module that reaches into vLLM internals: how a live ``vllm.LLM`` engine is stopped, parked for
reuse, checked, reset and released.

A hand-off never changes an outcome: an engine is parked only when it is alive, idle, awake and reset
within a time limit, and when nothing a reset cannot undo happened to it (watched as it happens: code run
in its workers, a level-2 sleep, a request sampled without its own seed, stats counting); its state at
start (configuration, tokenizer, generation defaults, weight version) is compared before it is handed on.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
import os
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from harness.memory.waits import settle
from harness.platform import allocator
from harness.tracking.context import current
from harness.tracking.starts import Run


@dataclass
class Use:
    """What a test did to an engine that no reset undoes, seen as it happened."""

    random: bool = False  # a request sampled without a seed of its own: the workers' random state moved on
    rpc: str | None = None  # code sent to its workers (collective_rpc, apply_model): weights may differ
    deep_sleep: bool = False  # slept at level 2: its weights were discarded


_stops: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # LLM -> its engine's real stop
_uses: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # LLM -> Use
_refused: weakref.WeakSet = weakref.WeakSet()  # LLMs the pool refused: a later shutdown only stops them


def watch_engine(llm, run: Run) -> None:
    """vLLM 0.32's LLM has no shutdown: callers stop ``llm.llm_engine.engine_core`` or drop the LLM.

    Both end in the engine-core client's ``shutdown``; wrapping it on the instance records explicit
    stops, and a finalizer on the LLM shuts the client down (idempotent in vLLM) and records the stop.
    With reuse on, an explicit ``shutdown`` (vLLM's ``VllmRunner.__exit__``) parks the engine in the pool
    instead, unless the pool refuses it.
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
    if current().pool is not None:
        _watch_use(llm, client)


def _watch_use(llm, client) -> None:
    """Note, as they happen, the uses of ``llm`` that no reset undoes (where this vLLM has the method)."""
    use = _uses[llm] = Use()
    engine = llm.llm_engine

    def add_request(add, request, *args, **kwargs):
        params = getattr(request, "sampling_params", None)
        if getattr(getattr(params, "sampling_type", None), "name", "") == "RANDOM":
            use.random = True
        return add(request, *args, **kwargs)

    def collective_rpc(rpc, method, *args, **kwargs):
        if callable(method) or not str(method).startswith("get_"):  # vLLM's own reads are get_*
            use.rpc = getattr(method, "__name__", str(method))
        return rpc(method, *args, **kwargs)

    def sleep(asleep, level: int = 1, *args, **kwargs):
        use.deep_sleep = use.deep_sleep or level >= 2
        return asleep(level, *args, **kwargs)

    for owner, name, watcher in (
        (client, "add_request", add_request),
        (engine, "collective_rpc", collective_rpc),
        (engine, "sleep", sleep),
    ):
        if (method := getattr(owner, name, None)) is not None:
            setattr(owner, name, functools.partial(watcher, method))


def close(llm, timeout: float | None) -> bool:
    """The harness's own runner closes ``llm``: parked (True) or shut down (False)."""
    stop = _stops.get(llm)
    if stop is None:  # not watched (vLLM's internals moved): stopped as it is
        llm.llm_engine.engine_core.shutdown(timeout=timeout)
        return False
    if _park(llm, functools.partial(stop, timeout=timeout), own=True):
        return True
    stop(timeout=timeout)
    return False


def _park(llm, stop: Callable[[], object], own: bool = False) -> bool:
    """Park ``llm`` in the reuse pool instead of stopping it; False when there is no pool or it refuses.

    The pool stops a parked engine later with ``stop``, the shutdown its owner asked for.
    """
    pool = current().pool
    if pool is None or llm in _refused:  # vLLM's own monitor shuts a dead engine down again
        return False
    if pool.holds(llm):  # stopped again while parked: its owner means it
        pool.drop(llm)
        return False
    began = pool.started.get(llm)
    parked = pool.park(
        began.key if began is not None else "",
        llm,
        fresh=False,
        reset=reset,
        state=state,
        alive=alive,
        shutdown=lambda _: stop(),
        release=release,
        refused=_unparkable(llm, own) or _left_by_error(),
    )
    if not parked:
        _refused.add(llm)
    return parked


def _left_by_error() -> str | None:
    """An engine shut down while an exception is handled (its ``with`` block raised) is not handed on."""
    error = sys.exc_info()[1]
    return None if error is None else f"it was closed by an exception ({type(error).__name__})"


def _unparkable(llm, own: bool) -> str | None:
    """Why an engine may not be parked at all, whatever its state; None when it may.

    An engine running in this process is torn down by what vLLM's conftest runs after ``shutdown``
    (``cleanup_dist_env_and_memory``). vLLM's conftest waits for memory after ``__exit__`` and before the
    next ``LLM(...)`` on ROCm (used below ``1 - gpu_memory_utilization``), and between tests on any GPU
    with ``VLLM_TEST_CLEAN_GPU_MEMORY=1`` (below 10 %): a parked engine's memory would hold those waits,
    so there the harness's own runner parks and a suite's own runner does not. An engine counting stats
    (``disable_log_stats=False``) would carry its counters over.
    """
    try:
        engine = llm.llm_engine
        in_process = not type(engine.engine_core).__name__.endswith("MPClient")
        engine.vllm_config  # noqa: B018 (what reset and state read)
    except AttributeError as error:
        return f"vllm.LLM internals moved ({error})"
    if in_process:
        return "its engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0): cleanup would end it"
    if getattr(engine, "log_stats", False):
        return "it counts stats (disable_log_stats=False): its counters would carry over"
    use = _uses.get(llm)
    if use is not None and (why := _used(use)) is not None:
        return why
    if own:
        return None
    platform = current().platform.name
    if platform == "rocm":
        return "vLLM's conftest waits on ROCm for its memory to be given back after each runner"
    if platform != "cpu" and os.environ.get("VLLM_TEST_CLEAN_GPU_MEMORY") == "1":
        return "VLLM_TEST_CLEAN_GPU_MEMORY=1: vLLM's conftest waits between tests for a nearly empty GPU"
    return None


def _used(use: Use) -> str | None:
    if use.rpc is not None:
        return (
            f"code ran in its workers through collective_rpc or apply_model ({use.rpc}): weights may differ"
        )
    if use.deep_sleep:
        return "it slept at level 2: its weights were discarded"
    if use.random:
        return "a request sampled without a seed of its own: its random state moved on from its seed"
    return None


def alive(llm) -> str | None:
    """Why ``llm`` cannot serve another test (its engine died, or requests are unfinished); None if it can.

    Read from the client alone, with no call into the engine: it runs before every hand-on.
    """
    try:
        engine = llm.llm_engine
        resources = engine.engine_core.resources
        if resources.engine_dead:
            return "its engine died (vLLM marked it dead)"
        manager = resources.engine_manager
        for process in getattr(manager, "processes", ()):
            if not process.is_alive():
                return f"its engine process {process.pid} exited ({process.exitcode})"
        if engine.has_unfinished_requests():
            return "requests were left unfinished in it"
    except Exception as error:  # an engine that cannot say is not one to hand on
        return f"checking it failed: {type(error).__name__}: {error}"
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
    """What a test can change in an engine that a reset does not put back: its configuration as the engine
    sees it, its tokenizer, its generation defaults and its weight version ("" where vLLM keeps no
    ``vllm_config`` there: parking is then refused, see ``_unparkable``)."""
    try:
        engine = llm.llm_engine
        config = engine.vllm_config
        model = config.model_config
    except AttributeError:
        return ""
    parts = {
        "configuration": str(config),
        "generation config": repr(
            (getattr(model, "override_generation_config", None), getattr(model, "generation_config", None))
        ),
        "tokenizer": _tokenizer(llm),
    }
    version = getattr(engine, "get_weight_version", None)
    if version is not None:
        try:
            parts["weight version"] = str(version())
        except Exception as error:  # an engine that cannot say is compared by what it says
            parts["weight version"] = type(error).__name__
    return json.dumps(parts)


TOKENIZER_FIELDS = ("padding_side", "truncation_side", "model_max_length", "chat_template", "add_bos_token")


def _tokenizer(llm) -> str:
    """A digest of what a test can change in the engine's tokenizer in place."""
    try:
        tokenizer = llm.get_tokenizer()
    except Exception as error:  # skip_tokenizer_init, or a tokenizer that cannot be read
        return type(error).__name__
    fields = [repr(getattr(tokenizer, name, None)) for name in TOKENIZER_FIELDS]
    fields.append(repr(getattr(tokenizer, "special_tokens_map", None)))
    try:
        fields.append(str(len(tokenizer)))
    except TypeError:
        pass
    return hashlib.sha256("\n".join(fields).encode()).hexdigest()


def reset(llm) -> str | None:
    """Undo what a test may leave in a live engine, within ``reuse_check_s``; the reason it cannot be
    handed on, or None. A reset that does not finish in time is refused (the engine is shut down)."""
    limit = current().settings.reuse_check_s
    outcome: list[str | None] = []
    worker = threading.Thread(target=lambda: outcome.append(_reset(llm)), name="harness-reset", daemon=True)
    worker.start()
    worker.join(limit)
    if not outcome:
        return f"its reset did not finish in {limit:g} s (reuse_check_s)"
    return outcome[0]


def _reset(llm) -> str | None:
    """Wakes a paused or sleeping engine, removes LoRA adapters, empties its caches (prefix, multimodal,
    encoder) and forgets the cached default sampling parameters (read again from the generation config).
    Each only where the engine has the feature: vLLM raises on ``list_loras`` without LoRA."""
    if (why := alive(llm)) is not None:
        return why
    engine = llm.llm_engine
    config = engine.vllm_config
    try:
        if engine.is_sleeping() and not llm.wake_up():  # level 0 (paused) needs no enable_sleep_mode
            return "it was left asleep and did not wake up fully"
        for adapter in sorted(engine.list_loras()) if config.lora_config is not None else ():
            if not engine.remove_lora(adapter):
                return f"LoRA adapter {adapter} could not be removed"
        if config.cache_config.enable_prefix_caching and not llm.reset_prefix_cache():
            return "its prefix cache could not be reset (requests still running)"
        if getattr(config.model_config, "is_multimodal_model", False):
            llm.reset_mm_cache()
            getattr(engine, "reset_encoder_cache", lambda: None)()
    except Exception as error:  # an engine that fails here is not one to hand on
        return f"resetting it failed: {type(error).__name__}: {error}"
    llm.default_sampling_params = None
    return None
