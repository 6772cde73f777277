"""Engine reuse (opt-in, ``reuse = true``): a closed engine stays warm for the next start of its configuration
(vLLM engines built by ``harness.runners.VllmRunner``).

Keyed by the configuration fingerprint the ledger records (``starts.fingerprint``), per process (an xdist
worker keeps its own). A start of another configuration first shuts warm engines down until the new one
fits: at most ``reuse_engines`` warm engines (default 1, so never two engines side by side) whose declared
fractions leave room for the new one. A handed-on engine is written as ``runner-reused`` (the start it
saved, with that start's measured seconds); an engine the owner could not reset is shut down and written
as ``reuse-refused`` with the reason. Engines still warm when the session ends are shut down then.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.ledger.writer import LedgerWriter
from harness.tracking.context import current
from harness.tracking.starts import Run


@dataclass
class Warm:
    """One parked engine: what shuts it down, and the run that started it (for the ledger)."""

    engine: Any
    run: Run | None
    shutdown: Callable[[Any], None]  # stops the engine
    release: Callable[[], None]  # gives memory back once the engine is dropped

    @property
    def fraction(self) -> float | None:
        return self.run.need.fraction if self.run is not None else None


@dataclass(frozen=True)
class Started:
    """How an engine began: its run (None when not recorded) and its state then (``state(engine)``)."""

    run: Run | None
    state: str


class Pool:
    """The warm engines of this process, least recently used first."""

    def __init__(self, writer: LedgerWriter, capacity: int = 1):
        self.writer, self.capacity = writer, capacity
        self.warm: dict[str, Warm] = {}
        self.started: weakref.WeakKeyDictionary[Any, Started] = weakref.WeakKeyDictionary()
        self.fresh = False  # the running test carries the fresh_engine marker

    def track(self, engine: Any, run: Run | None, state: str) -> None:
        """Remember how ``engine`` began (the instrumented constructor calls this)."""
        self.started[engine] = Started(run, state)

    def take(self, key: str) -> Any | None:
        """The warm engine of configuration ``key``, handed on and recorded; None when there is none."""
        warm = None if self.fresh else self.warm.pop(key, None)
        if warm is None:
            return None
        context = current()
        owner = context.owner.current()
        run = warm.run
        if run is not None:
            holder = context.holders.release(run.id)
            if holder is not None:  # blocked starts name the test that holds the engine now
                holder.owner = owner
                context.holders.hold(holder)
        self.writer.write(
            "runner-reused",
            runner=run.id if run else None,
            kind="vllm",
            model=run.model if run else None,
            fingerprint=key,
            **owner.fields(),
            saved_s=getattr(run, "startup_s", None),
        )
        return warm.engine

    def park(
        self,
        key: str,
        engine: Any,
        *,
        fresh: bool,
        reset: Callable[[Any], str | None],
        state: Callable[[Any], str],
        shutdown: Callable[[Any], None],
        release: Callable[[], None],
    ) -> bool:
        """Keep ``engine`` warm after ``reset``; False (the caller shuts it down) when it cannot be.

        An engine whose state (``state(engine)``) differs from its state at start was changed by a test in
        a way no reset undoes: it is refused, as is one an opted-out (``fresh``) runner started.
        """
        began = self.started.get(engine)
        run = began.run if began else None
        reason = _refusal(engine, began, fresh, reset, state)
        if reason is not None:
            self.writer.write(
                "reuse-refused",
                runner=run.id if run else None,
                fingerprint=key,
                model=run.model if run else None,
                test=current().owner.current().test,
                reason=reason,
            )
            return False
        if key in self.warm:  # two runners of one configuration were alive at once: keep the later
            self._shut(key)
        self.warm[key] = Warm(engine, run, shutdown, release)
        self.make_room(None, keep=self.capacity)
        return True

    def make_room(self, fraction: float | None, keep: int | None = None) -> None:
        """Before a start no warm engine serves: shut warm engines down, oldest first, until at most ``keep``
        (default ``capacity - 1``) remain and their declared fractions leave room for ``fraction``."""
        keep = self.capacity - 1 if keep is None else keep
        while self.warm and (len(self.warm) > keep or not self._fits(fraction)):
            self._shut(next(iter(self.warm)))

    def _fits(self, fraction: float | None) -> bool:
        declared = sum(w.fraction or 0.0 for w in self.warm.values())
        return fraction is None or declared + fraction <= 1.0

    def _shut(self, key: str) -> None:
        warm = self.warm.pop(key)
        release = warm.release
        warm.shutdown(warm.engine)
        del warm  # the pool's was the last reference: the engine goes before its memory is checked
        release()

    def close(self) -> None:
        """Shut every warm engine down (the session ends)."""
        while self.warm:
            self._shut(next(iter(self.warm)))


def _refusal(engine, began: Started | None, fresh: bool, reset, state) -> str | None:
    """Why ``engine`` may not be handed on, after resetting what can be reset; None when it may."""
    if fresh:
        return "the test asked for a fresh engine (fresh_engine marker)"
    if began is None:
        return "the harness did not see it start"
    reason = reset(engine)
    if reason is None and state(engine) != began.state:
        return "its configuration changed while in use (no reset undoes that)"
    return reason
