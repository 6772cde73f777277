"""The one record the adapter keeps per ``vllm.LLM`` (the bottom of the adapter: every other module of it
reads and writes here): how its engine began, its engine's real stop, what a test did to it that no reset
undoes, the warnings its start emitted, and whether its close is being decided."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # every recording session imports the adapter (patches): the recording path is imported
    # where vLLM is, as its wrappers first need it
    from harness.tracking.runs import Run


@dataclass
class Use:
    """What a test did to an engine that no reset undoes, seen as it happened."""

    random: bool = False  # a request sampled without a seed of its own: the workers' random state moved on
    rpc: str | None = None  # code sent to its workers (collective_rpc, apply_model): weights may differ
    deep_sleep: bool = False  # slept at level 2: its weights were discarded
    profiling: bool = False  # its profiler was started and not stopped (the reset stops it)
    requests: int = 0  # requests added to it so far
    parked_at: int | None = None  # ``requests`` when it was parked: one more since, and it was not quiet


@dataclass(frozen=True)
class Started:
    """How an engine began (or how a start would: what ``Engine.differs`` compares): its run (None when not
    recorded), its state then (``state(engine)``), its configuration ``key``, that configuration without its
    environment (``base``), that environment, whether its test opted out, and per argument the identities
    of its objects that are not data."""

    run: Run | None
    state: str
    key: str = ""
    base: str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    fresh: bool = False
    objects: dict[str, list[int]] = field(default_factory=dict)


@dataclass(eq=False)
class Tracked:
    """What the adapter knows of one ``vllm.LLM``."""

    began: Started | None = None  # how it began (reuse on)
    stop: Callable[..., object] | None = None  # its engine's real stop
    use: Use | None = None  # what was done to it (reuse on)
    warned: list = field(default_factory=list)  # the warnings its start emitted (reuse on)
    # being decided or refused: a second shutdown meanwhile (vLLM's monitor thread shuts a dead engine
    # down again) only stops it, with no second decision
    deciding: bool = False


_tracked: weakref.WeakKeyDictionary[Any, Tracked] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def of(llm: Any) -> Tracked:
    """``llm``'s record (an empty one for an LLM the adapter has not seen)."""
    with _lock:
        found = _tracked.get(llm)
        if found is None:
            found = _tracked[llm] = Tracked()
        return found


def decide(llm: Any) -> bool:
    """Mark ``llm``'s close as being decided; False when it already is."""
    record = of(llm)
    with _lock:
        if record.deciding:
            return False
        record.deciding = True
        return True
