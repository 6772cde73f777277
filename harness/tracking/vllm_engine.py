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
