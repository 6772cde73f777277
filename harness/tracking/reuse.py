"""Reuse (opt-in: ``reuse = true`` for vLLM engines, ``reuse_hf = true`` for HF models): one pool per
process keeps runners warm for the next start of their configuration, through one parking protocol.

What the pool parks is a ``Handle``: a vLLM engine (``vllm_engine.Engine``), parked when its owner closes
it (every ``vllm.LLM``: the harness's ``VllmRunner`` and a suite's own runner that shuts its engine core
down, as vLLM's ``tests/conftest.py`` does), or an HF model (``hf_reuse.Model``), parked at its load and
handed on once its test is done with it. The pool never looks inside one: the handle says why it may not
be parked (``refusal``), whether it still serves (``alive``), and stops itself (``stop``). The pool alone
hands on (``take``) and writes ``runner-reused`` and ``reuse-refused`` (the reason, naming what differs),
and makes room before a start (``make_room``: at most ``reuse_engines`` engines whose declared shares leave
room for the new one; HF models where a start's share is not free).

Keyed by the configuration fingerprint the ledger records, per process (an xdist worker keeps its own).
Engines still warm when the session ends, or when a test marked ``fresh_engine`` begins, are shut down then;
so are those a test parked before it failed. The running test has one ``mode`` (take, leave-only, fresh,
replay). A forked child (vLLM's ``fork_new_process_for_each_test``) starts with no engine of its parent's,
never stops, parks or takes them; warm engines give way before the fork, as without reuse they would be gone.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Protocol

from harness.tracking import leftovers
from harness.tracking.context import current

if TYPE_CHECKING:
    from harness.ledger.writer import LedgerWriter
    from harness.tracking.runs import Run

FRESH_MARKER = "the next test asked for a fresh engine (fresh_engine marker)"
ASKED_FRESH = "the test asked for a fresh engine (fresh_engine marker)"

# what the running test may do with the pool (``Pool.mode``), one value per test:
TAKE = "take"  # take warm runners and leave what it closes warm (the default)
LEAVE = "leave-only"  # start its own, and leave them warm after it (the safety net's fresh retry)
FRESH = "fresh"  # start its own and leave nothing (the fresh_engine marker)
REPLAY = "replay"  # take only the engines its failed try was handed (``held``), leave nothing


class Handle(Protocol):
    """A runner the pool parks, of either kind. A closed handle (a vLLM engine) is checked at its park and
    kept only while nothing is against it; an open one (``parked_in_use``, an HF model: nothing announces
    that its test is done with it) is parked at its load and checked at each take, and what shuts closed
    engines down (a failed test, a fresh one, a fork) leaves it to that check."""

    @property
    def kind(self) -> str: ...  # "vllm" or "hf", as the ledger names it

    @property
    def key(self) -> str: ...  # its configuration's fingerprint: what a start asks for

    @property
    def run(self) -> Run | None: ...  # its recorded start (None: the harness did not record it)

    @property
    def share(self) -> float | None: ...  # the share of each device it declared (None: none declared)

    @property
    def runner(self) -> Any: ...  # what a take hands on: the ``LLM``, the model

    @property
    def parked_in_use(self) -> bool: ...  # parked at its start, while its test uses it (an HF model)

    def parts(self) -> tuple[object, ...]:
        """What a thread that can still use it holds (the runner, its engine, its client)."""

    def refusal(self, against: str | None) -> str | None:
        """At its park: why it may not be kept (``against``: the pool's reason, given its place in the
        order of reasons; what can be reset is reset first), or None."""

    def differs(self, wanted: object) -> str | None:
        """At a start of another key (``wanted``: that start's record): why it may not have this one when
        it is the same by value but for what this names; None when it is another configuration."""

    def in_use(self) -> bool:
        """Its test still uses it: not handed on, not refused (the new start goes on beside it)."""

    def alive(self) -> str | None:
        """Before each hand-on: why it can no longer serve (it died, a test changed it), or None."""

    def stop(self) -> None:
        """Shut it down and give its memory back (the pool's was the last reference to it)."""


class Parked:
    """A handle in the pool: the test that parked it (None: parked in use) and what its park's checks took.
    A plain class: every recording session imports this module (through the adapter), and a dataclass's
    generated methods cost each one their compilation."""

    __slots__ = ("check_s", "handle", "test")

    def __init__(self, handle: Handle, test: str | None = None, check_s: float = 0.0) -> None:
        self.handle, self.test, self.check_s = handle, test, check_s


class Pool:
    """The parked runners of this process, least recently parked first; ``kinds``: those it keeps."""

    def __init__(self, writer: LedgerWriter, capacity: int = 1, kinds: tuple[str, ...] = ("vllm",)):
        self.writer, self.capacity, self.kinds = writer, capacity, frozenset(kinds)
        self.warm: dict[str, Parked] = {}
        self.mode = TAKE  # what the running test may do with the pool
        self.failed = False  # the running test failed: what it closes is not parked
        self.handed = 0  # runners handed on during the running test
        self.given: weakref.WeakSet[Any] = weakref.WeakSet()  # those runners
        # engines handed to the running test that it closed with a refusal or failed on: kept (refusal
        # written, stop deferred) until its outcome is known, so that a replay of the test can be handed
        # the very engine it failed on (``pytest_plugin.safety_net``); shut down when that is decided
        self.held: dict[str, Parked] = {}
        self.inherited: list[Parked] = []  # a forked child's: its parent's, never touched (see _forked)
        self.pid = os.getpid()  # the process whose runners these are
        self.threads = set(threading.enumerate())  # alive when the running test (or the session) began
        self.strays: weakref.WeakSet[threading.Thread] = weakref.WeakSet()  # left running by earlier tests
        _pools.add(self)
        # registered after its writer's (which holds its lock over a fork), so it runs before that one
        mine = weakref.ref(self)
        os.register_at_fork(before=lambda: _forking(mine()))

    def keeps(self, kind: str) -> bool:
        """Whether reuse of ``kind`` (``vllm``, ``hf``) is on."""
        return kind in self.kinds

    def holds(self, runner: Any) -> bool:
        return any(p.handle.runner is runner for p in (*self.warm.values(), *self.held.values()))

    def drop(self, runner: Any) -> None:
        """Forget a parked runner its owner stops after all (a second shutdown): it is not handed on."""
        for kept in (self.warm, self.held):
            for key in [k for k, parked in kept.items() if parked.handle.runner is runner]:
                del kept[key]

    def replayable(self) -> bool:
        """Whether what the running test was handed is still here for a replay: engines held for it, or
        HF models still parked."""
        return bool(self.held) or any(
            p.handle.parked_in_use and p.handle.runner in self.given for p in self.warm.values()
        )

    # --- take ----------------------------------------------------------------------------------------

    def take(self, key: str, wanted: object = None) -> Any | None:
        """The runner parked under ``key``, handed on and recorded; None: start one.

        A parked runner that no longer serves is refused and stopped. With none of ``key``, a parked one the
        same by value but for what it names (``Handle.differs`` against ``wanted``) is refused, by name.
        """
        if self.mode not in (TAKE, REPLAY):
            return None
        parked = self._parked(key)
        if parked is None:
            if self.mode == TAKE and wanted is not None:
                self._refuse_near(wanted)
            return None
        handle = parked.handle
        if handle.in_use():  # the start goes on beside it; the pool keeps the newer one
            return None
        began = time.monotonic()
        reason = handle.alive()
        if reason is not None:
            self._remove(key, parked)
            self._refused(handle, reason)
            self._stop(parked)
            return None
        if not handle.parked_in_use:  # an open one stays parked: handed on again while unchanged
            self._remove(key, parked)
        return self._hand_on(parked, time.monotonic() - began)

    def _parked(self, key: str) -> Parked | None:
        """What a take of ``key`` may have: in a replay the engines held for it, and parked HF models."""
        if self.mode != REPLAY:
            return self.warm.get(key)
        parked = self.warm.get(key)
        return self.held.get(key) or (parked if parked is not None and parked.handle.parked_in_use else None)

    def _remove(self, key: str, parked: Parked) -> None:
        for kept in (self.warm, self.held):
            if kept.get(key) is parked:
                del kept[key]

    def _hand_on(self, parked: Parked, checked_s: float) -> Any:
        handle, run = parked.handle, parked.handle.run
        self.handed += 1
        self.given.add(handle.runner)
        context = current()
        owner = context.owner.current()
        if run is not None:
            holder = context.holders.release(run.id)
            if holder is not None:  # blocked starts name the test that holds the runner now
                holder.owner = owner
                context.holders.hold(holder)
        context.reused += 1
        context.reused_s += getattr(run, "startup_s", None) or 0.0
        self.writer.write(
            "runner-reused",
            runner=run.id if run else None,
            kind=handle.kind,
            model=run.model if run else None,
            fingerprint=handle.key,
            **owner.fields(),
            saved_s=getattr(run, "startup_s", None),
            handoff_s=round(parked.check_s + checked_s, 4),
        )
        return handle.runner

    def _refuse_near(self, wanted: object) -> None:
        """A parked runner the same by value that this start may not have: why, by name."""
        for parked in self.warm.values():
            if (reason := parked.handle.differs(wanted)) is not None:
                self._refused(parked.handle, reason)

    # --- park ----------------------------------------------------------------------------------------

    def park(self, handle: Handle) -> bool:
        """Keep ``handle`` for the next start of its key; False (its owner stops it) when it is refused.

        An open handle is kept as it is (checked at each take). A closed one is refused when the pool has
        a reason (its test failed or asked for fresh engines, a forked test's process) or the handle has
        one (``refusal``), and when it served a replay; one handed to the running test is then held for
        the test's replay until its outcome is known.
        """
        if handle.parked_in_use:
            self._keep(Parked(handle))
            return True
        checking = time.monotonic()
        reason = handle.refusal(self._against() or self._reached(handle))
        if self.mode == REPLAY and reason is None:
            reason = "it served the replay of a failed test"
        if reason is not None:
            self._refused(handle, reason)
            if handle.runner in self.given and self.mode == TAKE and self.pid == os.getpid():
                self.held[handle.key] = Parked(handle)
                return True  # stopped once its test's outcome is known (``let_go``)
            return False
        test = current().owner.current().test
        self._keep(Parked(handle, test, time.monotonic() - checking))
        self.make_room(None, keep=self.capacity)
        return True

    def _keep(self, parked: Parked) -> None:
        if parked.handle.key in self.warm:  # two runners of one configuration were alive at once: the later
            self._shut(parked.handle.key)
        self.warm[parked.handle.key] = parked

    def _against(self) -> str | None:
        if self.failed:
            return "its test failed"
        if self.pid != os.getpid():  # a forked child's pool: its own engine or its parent's
            return "it is closed in a forked test's process, which ends without closing what it keeps"
        if self.mode == FRESH:
            return ASKED_FRESH
        return None

    def _reached(self, handle: Handle) -> str | None:
        """Why a closed engine may not be parked while a thread its test (or an earlier one) left can still
        reach it (``leftovers``): one that sends a request later would send it to the next test's engine."""
        left = [t for t in leftovers.running() if t not in self.threads or t in self.strays]
        reaching = leftovers.reaching(handle.parts(), left) if left else []
        if not reaching:
            return None
        return (
            f"a thread its test left running can still reach it ({leftovers.describe(reaching)}): "
            "a request it sends later would reach the next test's engine"
        )

    # --- the running test ----------------------------------------------------------------------------

    def test_failed(self, test: str) -> None:
        """``test`` failed: the engines it parked are shut down (those handed to it are held for its
        replay), and what it closes from now on is not parked (a test that fails may have left its engine
        in any state)."""
        self.failed = True
        for key in [k for k, parked in self.warm.items() if parked.test == test]:
            parked = self.warm.pop(key)
            self._refused(parked.handle, "its test failed", test=test)
            if parked.handle.runner in self.given and self.mode == TAKE:
                self.held[key] = parked
            else:
                self._stop(parked)

    def test_ended(self) -> None:
        """The running test's teardown is over: the threads it left running are strays from now on, and a
        parked engine one of them can reach is shut down (a thread started after the engine's close)."""
        self.strays.update(t for t in leftovers.running() if t not in self.threads)
        for key in self._engines():
            if (reason := self._reached(self.warm[key].handle)) is not None:
                self._refused(self.warm[key].handle, reason)
                self._shut(key)

    def let_go(self) -> None:
        """The running test's outcome is known: the engines held for its replay are shut down."""
        while self.held:
            self._stop(self.held.pop(next(iter(self.held))))

    def next_test(self, test: str, fresh: str | None = None, mode: str = TAKE) -> None:
        """``test`` (or another try of it) begins in ``mode``; ``fresh`` (why) shuts every warm engine down
        first (a ``FRESH`` or ``LEAVE`` test); nothing was handed to it yet."""
        self.failed, self.handed, self.mode = False, 0, TAKE
        self.given = weakref.WeakSet()
        self.threads = set(threading.enumerate())
        if mode != REPLAY:
            self.let_go()
        if fresh is not None:
            self.fresh_test(test, fresh)
        self.mode = mode

    def fresh_test(self, test: str, reason: str = FRESH_MARKER) -> None:
        """A test that asks for fresh engines begins: every warm engine is shut down, each with the reason
        (parked HF models stay: each take checks them)."""
        self.mode = FRESH
        self.let_go()
        for key in [k for k, parked in self.warm.items() if not parked.handle.parked_in_use]:
            self._refused(self.warm[key].handle, reason, test=test)
            self._shut(key)

    # --- room, stops and the ledger ------------------------------------------------------------------

    def make_room(self, fraction: float | None, keep: int | None = None) -> None:
        """Before a start no parked runner serves (``fraction``: the share it declares): warm engines shut
        down, oldest first, until at most ``keep`` (default ``capacity - 1``) remain and their declared
        shares leave room for it; parked HF models dropped where that share is not free on a device (on
        the CPU, vLLM's KV cache is sized apart from what models keep)."""
        keep = self.capacity - 1 if keep is None else keep
        if keep < self.capacity:  # a start: engines held for a replay give way too
            self.let_go()
        while (engines := self._engines()) and (len(engines) > keep or not self._fits(fraction)):
            self._shut(engines[0])
        if fraction is not None and self._short_of(fraction):
            for key in [k for k, parked in self.warm.items() if parked.handle.parked_in_use]:
                self._shut(key)

    def _engines(self) -> list[str]:
        return [k for k, parked in self.warm.items() if not parked.handle.parked_in_use]

    def _fits(self, fraction: float | None) -> bool:
        declared = sum(self.warm[k].handle.share or 0.0 for k in self._engines())
        return fraction is None or declared + fraction <= 1.0

    def _short_of(self, fraction: float) -> bool:
        platform = current().platform
        if len(self._engines()) == len(self.warm) or not platform.engine_memory_measured:
            return False
        return any(r.free_bytes < fraction * r.total_bytes for r in platform.memory().values())

    def _shut(self, key: str) -> None:
        self._stop(self.warm.pop(key))

    @staticmethod
    def _stop(parked: Parked) -> None:
        parked.handle.stop()

    def _refused(self, handle: Handle, reason: str, test: str | None = None) -> None:
        run = handle.run
        self.writer.write(
            "reuse-refused",
            runner=run.id if run else None,
            fingerprint=handle.key,
            model=run.model if run else None,
            test=test or current().owner.current().test,
            reason=reason,
        )

    def close(self) -> None:
        """Stop every parked runner (the session ends)."""
        self.let_go()
        while self.warm:
            self._shut(next(iter(self.warm)))

    def forked(self) -> None:
        """In a forked child: the parent's engines are kept out of reach, never stopped here (their
        finalizers would shut the parent's engine down) nor handed on (their sockets are the parent's);
        parked HF models stay (the child's copy)."""
        engines = [k for k, parked in self.warm.items() if not parked.handle.parked_in_use]
        self.inherited.extend([*(self.warm.pop(k) for k in engines), *self.held.values()])
        self.held = {}


def pool(kind: str | None = None) -> Pool | None:
    """This process's reuse pool (the context holds it) when it keeps ``kind`` (``vllm``, ``hf``; None:
    either), else None. The context, below this module, does not know the pool's type: this is its typed
    way in."""
    found: Pool | None = current().pool
    return found if found is not None and (kind is None or found.keeps(kind)) else None


_pools: weakref.WeakSet[Pool] = weakref.WeakSet()

FORKING = "a test forks a process: warm engines give way to what its child starts, as without reuse they "
FORKING += "would be gone"


def _forking(pool: Pool | None) -> None:
    """A test forks (vLLM's ``fork_new_process_for_each_test``): engines only reuse keeps alive are shut
    down first, so they never block (or share memory with) what the child starts. A fork within a start
    (vLLM forking its engine process) or outside a test leaves them."""
    if pool is None or getattr(current().starting, "active", False):
        return
    test = current().owner.current().test
    if pool.pid == os.getpid() and (pool._engines() or pool.held) and test:
        mode = pool.mode
        pool.fresh_test(test, FORKING)
        pool.mode = mode


def _forked() -> None:
    for pool in list(_pools):
        pool.forked()


os.register_at_fork(after_in_child=_forked)
