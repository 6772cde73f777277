"""Whether a live engine still serves (``alive``), what a test can change in it that no reset undoes
(``state``), its reset within ``reuse_check_s``, and what follows its stop (``release``)."""

from __future__ import annotations

import gc
import hashlib
import json
import threading
from typing import Any

from harness.tracking.context import current
from harness.tracking.vllm import llms
from harness.tracking.vllm.tables import PLAIN_SCALARS, RESET_ATTRIBUTES, TOKENIZER_FIELDS


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
                return f"its engine process exited (pid {process.pid}, exit code {process.exitcode})"
        if engine.has_unfinished_requests():
            return "requests were left unfinished in it"
        use = llms.of(llm).use
        if use is not None and use.parked_at is not None and use.requests != use.parked_at:
            return "a request reached it after its close (a thread of its test still used it)"
    except Exception as error:  # an engine that cannot say is not one to hand on
        return f"checking it failed: {type(error).__name__}: {error}"
    return None


def release() -> None:
    """After an engine is stopped and dropped: collect, empty caches, clean vLLM's distributed state, and
    on ROCm wait for the driver to give memory back (what a runner's own teardown does after a stop)."""
    from harness.memory.waits import settle
    from harness.platform import allocator

    gc.collect()
    allocator.empty_cache()
    cleanup()
    context = current()
    settle(context.platform, context.settings)


def state(llm) -> str:
    """What a test can change in an engine that a reset does not put back, compared as a whole rather than
    listed: its configuration by value (every field of ``vllm_config`` and the configs below it, so an
    in-place edit of a limit read per request shows), the ``LLM``'s and its engine's attributes (one
    replaced or added: a method patched on the instance, a tokenizer swapped), its tokenizer, its
    generation defaults and its weight version ("" where vLLM keeps no ``vllm_config`` there: parking is
    then refused, see ``_unparkable``)."""
    from harness.tracking.fingerprints import json_safe

    try:
        engine = llm.llm_engine
        config = engine.vllm_config
        model = config.model_config
    except AttributeError:
        return ""
    parts: dict[str, Any] = {
        "configuration": hashlib.sha256(json.dumps(json_safe(config), sort_keys=True).encode()).hexdigest(),
        "generation config": repr(
            (getattr(model, "override_generation_config", None), getattr(model, "generation_config", None))
        ),
        "tokenizer": _tokenizer(llm),
        "LLM attribute": _attributes(llm, RESET_ATTRIBUTES),
        "engine attribute": _attributes(engine, ()),
    }
    version = getattr(engine, "get_weight_version", None)
    if version is not None:
        try:
            parts["weight version"] = str(version())
        except Exception as error:  # an engine that cannot say is compared by what it says
            parts["weight version"] = type(error).__name__
    return json.dumps(parts)


def changed(before: str, now: str) -> str:
    """What differs between two states: the names of a JSON object's parts that differ (``state`` names
    them: configuration, tokenizer, ...), else "configuration"."""
    try:
        then, later = json.loads(before), json.loads(now)
    except ValueError:
        return "configuration"
    if not isinstance(then, dict) or not isinstance(later, dict):
        return "configuration"
    named = []
    for part in dict.fromkeys([*then, *later]):
        was, now_ = then.get(part), later.get(part)
        if was == now_:
            continue
        if isinstance(was, dict) and isinstance(now_, dict):  # name the attributes that differ
            names = [n for n in dict.fromkeys([*was, *now_]) if was.get(n) != now_.get(n)]
            part = f"{part}{'s' if len(names) > 1 else ''} {', '.join(names)}"
        named.append(part)
    return " and ".join(named)


def _attributes(obj: object, reset: tuple[str, ...]) -> dict[str, str]:
    """``obj``'s own attributes: plain values by value, the rest by identity (replaced: another object)."""
    return {
        name: repr(value) if isinstance(value, PLAIN_SCALARS) else f"{type(value).__qualname__}@{id(value)}"
        for name, value in sorted(getattr(obj, "__dict__", {}).items())
        if name not in reset
    }


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
        use = llms.of(llm).use
        if (use is not None and use.profiling) or getattr(engine, "_profile_session_active", False):
            engine.stop_profile()
        getattr(getattr(llm, "request_counter", None), "reset", lambda: None)()  # request ids from 0 again
    except Exception as error:  # an engine that fails here is not one to hand on
        return f"resetting it failed: {type(error).__name__}: {error}"
    llm.default_sampling_params = None
    return None


def cleanup() -> None:
    """vLLM's ``cleanup_dist_env_and_memory`` where the installed vLLM has it."""
    try:
        from vllm.distributed import cleanup_dist_env_and_memory
    except ImportError:  # a vLLM that moved it: the caller's collection is what is left to do
        return
    cleanup_dist_env_and_memory()
