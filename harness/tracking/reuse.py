"""Engine reuse (opt-in, ``reuse = true``): a closed engine stays warm for the next start of its configuration
(every ``vllm.LLM``: the harness's ``VllmRunner`` and a suite's own runner that shuts its engine core down,
as vLLM's ``tests/conftest.py`` does; ``tracking.vllm_engine`` parks it instead).

Keyed by the configuration fingerprint the ledger records (``starts.fingerprint``: the call's arguments and
the ``VLLM_*`` environment), per process (an xdist worker keeps its own). A start of another configuration
first shuts warm engines down until the new one fits: at most ``reuse_engines`` warm engines whose declared
fractions leave room for the new one. A handed-on engine is written as ``runner-reused`` (the start it
saved, with that start's measured seconds); an engine that may not be kept or handed on is written as
``reuse-refused`` with the reason. Engines still warm when the session ends, or when a test marked
``fresh_engine`` begins, are shut down then; so are those a test parked before it failed.

Per process: a forked child (vLLM's ``fork_new_process_for_each_test``) starts with an empty pool and
never stops, parks or takes its parent's engines, which the parent hands on after the child's test.
"""

from __future__ import annotations

import json
import os
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.ledger.writer import LedgerWriter
from harness.tracking.context import current
from harness.tracking.starts import Run

FRESH_MARKER = "the next test asked for a fresh engine (fresh_engine marker)"

# what the running test may do with the pool (``Pool.mode``), one value per test:
TAKE = "take"  # take warm engines and leave what it closes warm (the default)
LEAVE = "leave-only"  # start its own, and leave them warm after it (the safety net's fresh retry)
FRESH = "fresh"  # start its own and leave nothing (the fresh_engine marker)
REPLAY = "replay"  # take only the engines its failed try was handed (``held``), leave nothing


class Keeper(Protocol):
    """What keeps runners warm for the next start of their configuration, in one vocabulary: the vLLM
    ``Pool`` and the HF ``hf_reuse.Shelf``. A runner is parked after its start or close, taken (handed on,
    ``runner-reused``) or refused (``reuse-refused``, with the reason), and closed at the session's end."""

    def take(self, key: str) -> Any | None: ...

    def make_room(self, fraction: float | None) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Started:
    """How an engine began: its run (None when not recorded), its state then (``state(engine)``), its
    configuration ``key``, that configuration without its environment (``base``), that environment, and
    whether its test opted out."""

    run: Run | None
    state: str
    key: str = ""
    base: str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    fresh: bool = False
    objects: dict[str, list[int]] = field(default_factory=dict)  # per argument, its objects' identities


@dataclass
class Warm:
    """One parked engine: what shuts it down, and how it began (for the ledger)."""

    engine: Any
    began: Started | None
    shutdown: Callable[[Any], None]  # stops the engine
    release: Callable[[], None]  # gives memory back once the engine is dropped
    alive: Callable[[Any], str | None]  # why it can no longer serve (checked again before a hand-on)
    test: str | None = None  # the test that parked it
    check_s: float = 0.0  # what its checks and reset took when it was parked

    @property
    def run(self) -> Run | None:
        return self.began.run if self.began is not None else None

    @property
    def fraction(self) -> float | None:
        return self.run.need.fraction if self.run is not None else None


class Pool:
    """The warm engines of this process, least recently used first."""

    def __init__(self, writer: LedgerWriter, capacity: int = 1):
        self.writer, self.capacity = writer, capacity
        self.warm: dict[str, Warm] = {}
        self.started: weakref.WeakKeyDictionary[Any, Started] = weakref.WeakKeyDictionary()
        self.mode = TAKE  # what the running test may do with the pool
        self.failed = False  # the running test failed: what it closes is not parked
        self.handed = 0  # engines handed on during the running test
        self.given: weakref.WeakSet[Any] = weakref.WeakSet()  # those engines
        # engines handed to the running test that it closed with a refusal or failed on: kept (refusal
        # written, stop deferred) until its outcome is known, so that a replay of the test can be handed
        # the very engine it failed on (``pytest_plugin.safety_net``); shut down when that is decided
        self.held: dict[str, Warm] = {}
        self.inherited: list[Warm] = []  # a forked child's: its parent's, never touched (see _forked)
        self.pid = os.getpid()  # the process whose engines these are
        _pools.add(self)
        # registered after its writer's (which holds its lock over a fork), so it runs before that one
        mine = weakref.ref(self)
        os.register_at_fork(before=lambda: _forking(mine()))

    @property
    def fresh(self) -> bool:
        """The running test leaves nothing warm (the fresh_engine marker)."""
        return self.mode == FRESH

    @fresh.setter
    def fresh(self, value: bool) -> None:
        self.mode = FRESH if value else TAKE

    def track(
        self,
        engine: Any,
        run: Run | None,
        state: str,
        key: str = "",
        base: str | None = None,
        environment: dict[str, str] | None = None,
        objects: dict[str, list[int]] | None = None,
    ) -> None:
        """Remember how ``engine`` began (the instrumented constructor calls this)."""
        self.started[engine] = Started(run, state, key, base, environment or {}, self.fresh, objects or {})

    def holds(self, engine: Any) -> bool:
        return any(warm.engine is engine for warm in (*self.warm.values(), *self.held.values()))

    def drop(self, engine: Any) -> None:
        """Forget a parked engine its owner stops after all (a second shutdown): it is not handed on."""
        for kept in (self.warm, self.held):
            for key in [k for k, warm in kept.items() if warm.engine is engine]:
                del kept[key]

    def take(
        self,
        key: str,
        base: str | None = None,
        environment: dict[str, str] | None = None,
        objects: dict[str, list[int]] | None = None,
    ) -> Any | None:
        """The warm engine of configuration ``key``, handed on and recorded; None when there is none.

        A warm engine of the same arguments by value (``base``) under another environment, or with another
        object (not data: compared by identity) in an argument, is not handed on: the refusal names the
        variables or arguments that differ.
        """
        if self.mode not in (TAKE, REPLAY):
            return None
        warm = (self.held if self.mode == REPLAY else self.warm).pop(key, None)
        if warm is None:
            if self.mode == TAKE:
                self._refuse_near(base, environment or {}, objects or {})
            return None
        began = time.monotonic()
        reason = warm.alive(warm.engine)
        if reason is not None:
            self._refused(key, warm.run, reason)
            self._stop(warm)
            return None
        self.handed += 1
        self.given.add(warm.engine)
        context = current()
        owner = context.owner.current()
        run = warm.run
        if run is not None:
            holder = context.holders.release(run.id)
            if holder is not None:  # blocked starts name the test that holds the engine now
                holder.owner = owner
                context.holders.hold(holder)
        context.reused += 1
        context.reused_s += getattr(run, "startup_s", None) or 0.0
        self.writer.write(
            "runner-reused",
            runner=run.id if run else None,
            kind="vllm",
            model=run.model if run else None,
            fingerprint=key,
            **owner.fields(),
            saved_s=getattr(run, "startup_s", None),
            handoff_s=round(warm.check_s + time.monotonic() - began, 4),
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
        alive: Callable[[Any], str | None] = lambda _: None,
        refused: str | None = None,
    ) -> bool:
        """Keep ``engine`` warm after ``reset``; False (the caller shuts it down) when it cannot be.

        An engine whose state (``state(engine)``) differs from its state at start was changed by a test in
        a way no reset undoes: it is refused, as is one an opted-out (``fresh``) test started or closes, and
        one the caller already knows a reason against (``refused``), one closed after its test failed and
        one another process started.
        """
        began = self.started.get(engine)
        fresh = fresh or self.fresh or (began is not None and began.fresh)
        checking = time.monotonic()
        reason = refused or self._against() or _refusal(engine, began, fresh, reset, state)
        if self.mode == REPLAY and reason is None:
            reason = "it served the replay of a failed test"
        if reason is not None:
            self._refused(key, began.run if began else None, reason)
            if engine in self.given and self.mode == TAKE and self.pid == os.getpid():
                self.held[key] = Warm(engine, began, shutdown, release, alive, None, 0.0)
                return True  # stopped once its test's outcome is known (``let_go``)
            return False
        if key in self.warm:  # two runners of one configuration were alive at once: keep the later
            self._shut(key)
        test = current().owner.current().test
        self.warm[key] = Warm(engine, began, shutdown, release, alive, test, time.monotonic() - checking)
        self.make_room(None, keep=self.capacity)
        return True

    def _against(self) -> str | None:
        if self.failed:
            return "its test failed"
        if self.pid != os.getpid():  # a forked child's pool: its own engine or its parent's
            return "it is closed in a forked test's process, which ends without closing what it keeps"
        return None

    def test_failed(self, test: str) -> None:
        """``test`` failed: the engines it parked are shut down (those handed to it are held for its
        replay), and what it closes from now on is not parked (a test that fails may have left its engine
        in any state)."""
        self.failed = True
        for key in [k for k, warm in self.warm.items() if warm.test == test]:
            self._refused(key, self.warm[key].run, "its test failed", test=test)
            warm = self.warm.pop(key)
            if warm.engine in self.given and self.mode == TAKE:
                self.held[key] = warm
            else:
                self._stop(warm)

    def let_go(self) -> None:
        """The running test's outcome is known: the engines held for its replay are shut down."""
        while self.held:
            self._stop(self.held.pop(next(iter(self.held))))

    def next_test(self, test: str, fresh: str | None = None, mode: str = TAKE) -> None:
        """``test`` (or another try of it) begins in ``mode``; ``fresh`` (why) shuts every warm engine down
        first (a ``FRESH`` or ``LEAVE`` test); nothing was handed to it yet."""
        self.failed, self.handed, self.mode = False, 0, TAKE
        self.given = weakref.WeakSet()
        if mode != REPLAY:
            self.let_go()
        if fresh is not None:
            self.fresh_test(test, fresh)
        self.mode = mode

    def fresh_test(self, test: str, reason: str = FRESH_MARKER) -> None:
        """A test that asks for fresh engines begins: every warm engine is shut down, each with the reason."""
        self.mode = FRESH
        self.let_go()
        while self.warm:
            key = next(iter(self.warm))
            self._refused(key, self.warm[key].run, reason, test=test)
            self._shut(key)

    def _refuse_near(
        self, base: str | None, environment: dict[str, str], objects: dict[str, list[int]]
    ) -> None:
        """A warm engine of the same arguments by value that this start may not have: why, by name."""
        for key, warm in self.warm.items():
            if base is None or warm.began is None or warm.began.base != base:
                continue
            self._refused(key, warm.run, _differs(warm.began, environment, objects))

    def _refused(self, key: str, run: Run | None, reason: str, test: str | None = None) -> None:
        self.writer.write(
            "reuse-refused",
            runner=run.id if run else None,
            fingerprint=key,
            model=run.model if run else None,
            test=test or current().owner.current().test,
            reason=reason,
        )

    def make_room(self, fraction: float | None, keep: int | None = None) -> None:
        """Before a start no warm engine serves: shut warm engines down, oldest first, until at most ``keep``
        (default ``capacity - 1``) remain and their declared fractions leave room for ``fraction``."""
        keep = self.capacity - 1 if keep is None else keep
        if keep < self.capacity:  # a start: engines held for a replay give way too
            self.let_go()
        while self.warm and (len(self.warm) > keep or not self._fits(fraction)):
            self._shut(next(iter(self.warm)))

    def _fits(self, fraction: float | None) -> bool:
        declared = sum(w.fraction or 0.0 for w in self.warm.values())
        return fraction is None or declared + fraction <= 1.0

    def _shut(self, key: str) -> None:
        self._stop(self.warm.pop(key))

    @staticmethod
    def _stop(warm: Warm) -> None:
        release = warm.release
        warm.shutdown(warm.engine)
        del warm  # the pool's was the last reference: the engine goes before its memory is checked
        release()

    def close(self) -> None:
        """Shut every warm engine down (the session ends)."""
        self.let_go()
        while self.warm:
            self._shut(next(iter(self.warm)))

    def forked(self) -> None:
        """In a forked child: the parent's warm engines are kept out of reach, never stopped here (their
        finalizers would shut the parent's engine down) nor handed on (their sockets are the parent's)."""
        self.inherited.extend([*self.warm.values(), *self.held.values()])
        self.warm, self.held = {}, {}


_pools: weakref.WeakSet[Pool] = weakref.WeakSet()

FORKING = "a test forks a process: warm engines give way to what its child starts, as without reuse they "
FORKING += "would be gone"


def _forking(pool: Pool | None) -> None:
    """A test forks (vLLM's ``fork_new_process_for_each_test``): engines only reuse keeps alive are shut
    down first, so they never block (or share memory with) what the child starts. A fork within a start
    (vLLM forking its engine process) or outside a test leaves them."""
    starts = sys.modules.get("harness.tracking.starts")
    if pool is None or (starts is not None and getattr(starts._starting, "active", False)):
        return
    test = current().owner.current().test
    if pool.pid == os.getpid() and (pool.warm or pool.held) and test:
        mode = pool.mode
        pool.fresh_test(test, FORKING)
        pool.mode = mode


def _forked() -> None:
    for pool in list(_pools):
        pool.forked()


os.register_at_fork(after_in_child=_forked)


def _refusal(engine, began: Started | None, fresh: bool, reset, state) -> str | None:
    """Why ``engine`` may not be handed on, after resetting what can be reset; None when it may."""
    if fresh:
        return "the test asked for a fresh engine (fresh_engine marker)"
    if began is None:
        return "the harness did not see it start"
    reason = reset(engine)
    if reason is None and (now := state(engine)) != began.state:
        return f"its {_changed(began.state, now)} changed while in use (no reset undoes that)"
    return reason


def _changed(before: str, now: str) -> str:
    """What differs between two states: the names of a JSON object's parts that differ (the engine's
    ``state`` names them: configuration, tokenizer, ...), else "configuration"."""
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


def _differs(began: Started, environment: dict[str, str], objects: dict[str, list[int]]) -> str:
    """What differs between an engine's start and a start of the same arguments by value: the variables
    (with their values where vLLM lists them, ``vllm_engine.environment``) and the arguments holding
    another object."""
    from harness.tracking.vllm_engine import environment as listed

    started = began.environment
    names = sorted(n for n in started.keys() | environment.keys() if started.get(n) != environment.get(n))
    shown = listed({**started, **environment})
    variables = [f"{n}={started.get(n)!r} -> {environment.get(n)!r}" if n in shown else n for n in names]
    arguments = sorted(
        n for n in began.objects.keys() | objects.keys() if began.objects.get(n) != objects.get(n)
    )
    parts = []
    if variables:
        parts.append(f"the environment vLLM reads differs from its start's ({', '.join(variables)})")
    if arguments:
        parts.append(
            f"{', '.join(arguments)} {'holds' if len(arguments) == 1 else 'hold'} another object than at its "
            "start (an object that is not data is compared by identity)"
        )
    return "; ".join(parts) or "its configuration differs from its start's"
