"""The one module that reaches into vLLM internals: how a live ``vllm.LLM`` engine is stopped."""

from __future__ import annotations

import time
import weakref

from harness.tracking.starts import Run


def watch_engine(llm, run: Run) -> None:
    """vLLM 0.32's LLM has no shutdown: callers stop ``llm.llm_engine.engine_core`` or drop the LLM.

    Both end in the engine-core client's ``shutdown``; wrapping it on the instance records explicit
    stops, and a finalizer on the LLM shuts the client down (idempotent in vLLM) and records the stop.
    A vLLM without those internals falls back to the LLM's lifetime, with a finding saying so: the
    user's ``LLM(...)`` has already built a working engine and must not raise here.
    """

    def shutdown(*args, **kwargs):
        began = time.monotonic()
        try:
            return original(*args, **kwargs)
        finally:
            run.stop(began)

    try:
        client = llm.llm_engine.engine_core
        original = client.shutdown
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
    weakref.finalize(llm, shutdown).atexit = False


def state(llm) -> str:
    """What the engine runs with as the engine itself sees it; a test that changes it changes this text."""
    return str(llm.llm_engine.vllm_config)


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
