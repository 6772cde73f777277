"""Parking a closed engine in the reuse pool: its handle (``Engine``, a ``reuse.Closing`` handle), why it
may not be parked (``parking_refusal``, ``unparkable``), and the two ways an engine is closed: by its owner's
shutdown (``park``) or by the harness's own runner (``close``)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from harness.tracking import reuse
from harness.tracking.context import current
from harness.tracking.handles import ASKED_FRESH
from harness.tracking.vllm import health, key, llms
from harness.tracking.vllm.llms import Started, Use

if TYPE_CHECKING:
    from harness.tracking.runs import Run


def close(llm, timeout: float | None) -> bool:
    """The harness's own runner closes ``llm``: parked (True) or shut down (False; the runner gives its
    memory back once it drops it). One path: the engine's own checks, the pool's one decision, the stop."""
    stop = llms.of(llm).stop  # None: not watched (vLLM's internals moved), stopped as it is
    parked = stop is not None and park(llm, functools.partial(stop, timeout=timeout), own=True)
    if not parked:
        (stop or llm.llm_engine.engine_core.shutdown)(timeout=timeout)
    return parked


def park(llm, stop: Callable[[], object], own: bool = False) -> bool:
    """Park ``llm`` in the reuse pool instead of stopping it; False when there is no pool, its close is
    being decided already, or the pool refuses it (or holds it already: stopped again, its owner means it).

    What the engine knows against itself (``unparkable``, a close by an exception) is read first, then the
    pool decides once (its reasons, then the handle's); the pool stops a parked engine later with ``stop``,
    the shutdown its owner asked for.
    """
    pool = reuse.pool("vllm")
    if pool is None:
        return False
    against = unparkable(llm, own) or _left_by_error()
    if not llms.decide(llm):
        return False
    record = llms.of(llm)
    parked = pool.park(Engine(llm, record.began, stop, against), reuse.running())
    if parked:  # handed on later, closed again then: decided anew
        record.deciding = False
        if (use := record.use) is not None:
            use.parked_at = use.requests
    return parked


@dataclass(eq=False)
class Engine:
    """The reuse pool's handle of a closed engine (a ``reuse.Closing`` handle): checked at its park (after
    the pool's reasons: what its close knows against it, a reset, its state against its start's), again
    before each hand-on (``alive``), and stopped with the shutdown its owner asked for."""

    runner: Any  # the LLM
    began: Started | None
    stopping: Callable[[], object]  # its owner's shutdown
    refused: str | None = None  # what its close already knows against it (``unparkable``, an exception)
    kind: ClassVar[str] = "vllm"

    @property
    def key(self) -> str:
        return self.began.key if self.began is not None else ""

    @property
    def run(self) -> Run | None:
        return self.began.run if self.began is not None else None

    @property
    def share(self) -> float | None:
        return self.run.need.fraction if self.run is not None else None

    def parts(self) -> tuple[object, ...]:
        engine = getattr(self.runner, "llm_engine", None)
        return (self.runner, engine, getattr(engine, "engine_core", None))

    def refusal(self) -> str | None:
        llm = self.runner
        return parking_refusal(self.began, self.refused, lambda: health.reset(llm), lambda: health.state(llm))

    def differs(self, wanted: object) -> str | None:
        return key.differs(self.began, wanted)

    def alive(self) -> str | None:
        return health.alive(self.runner)

    def stop(self) -> None:
        self.stopping()
        self.runner = None  # the pool's was the last reference: the engine goes before its memory is checked
        health.release()


def parking_refusal(
    began: Started | None, against: str | None, reset: Callable[[], str | None], now: Callable[[], str]
) -> str | None:
    """Why an engine that began as ``began`` may not be parked once the pool has no reason of its own, in
    order: ``against`` (what its close knows against it), a start under the fresh_engine marker, a start the
    harness did not see, what ``reset`` cannot undo, a state (``now()``) other than at its start; None when
    it may."""
    if against is not None:
        return against
    if began is not None and began.fresh:
        return ASKED_FRESH
    if began is None:
        return "the harness did not see it start"
    reason = reset()
    if reason is None and (state_now := now()) != began.state:
        return f"its {health.changed(began.state, state_now)} changed while in use (no reset undoes that)"
    return reason


def _left_by_error() -> str | None:
    """An engine shut down while an exception is handled (its ``with`` block raised) is not handed on."""
    error = sys.exc_info()[1]
    return None if error is None else f"it was closed by an exception ({type(error).__name__})"


def unparkable(llm, own: bool) -> str | None:
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
    use = llms.of(llm).use
    if use is not None and (why := _used(use)) is not None:
        return why
    if own:
        return None
    platform = current().platform
    if platform.waits_for_release:
        said = platform.display_name
        return f"vLLM's conftest waits on {said} for its memory to be given back after each runner"
    if platform.gpu and os.environ.get("VLLM_TEST_CLEAN_GPU_MEMORY") == "1":
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
