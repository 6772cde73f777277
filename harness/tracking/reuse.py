"""Reuse (opt-in: ``reuse = true`` for vLLM engines, ``reuse_hf = true`` for HF models): one pool per
process keeps runners warm for the next start of their configuration.

The seam is shaped like pytest-xdist's scheduler seam: the kind of a runner picks its pool policy once
(``POLICIES``: ``Closed`` for a vLLM engine, parked when its owner closes it and checked then; ``Open`` for
an HF model, parked at its load and checked at each take, as nothing announces that its test is done with
it), and the running test's terms (``Terms``: its mode, whether it failed, what it was handed, the engines
held for its replay, its process, its threads) are the safety-net plugin's, passed to every park and take.
A handle (``Handle``, with ``Closing`` or ``Opened`` members: ``vllm.parking.Engine``, ``hf.parking.Model``)
says only what its kind can: why it may not be parked, whether it still serves, how it stops. The pool
builds every refusal (``refusal``: its own reasons first, then the handle's), alone hands on (``take``),
writes ``runner-reused`` and ``reuse-refused``, and makes room before a start (``make_room``: at most
``reuse_engines`` engines whose declared shares leave room for the new one; HF models where a start's share
is not free).

Keyed by the configuration fingerprint the ledger records, per process (an xdist worker keeps its own).
Engines still warm when the session ends, or when a test marked ``fresh_engine`` begins, are shut down then;
so are those a test parked before it failed, and those a thread it left running can still reach
(``leftovers``). A forked child (vLLM's ``fork_new_process_for_each_test``) starts with no engine of its
parent's, never stops, parks or takes them; warm engines give way before the fork, as without reuse they
would be gone.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING, Any

from harness.tracking import leftovers
from harness.tracking.context import current
from harness.tracking.handles import (
    ASKED_FRESH,
    FAILED,
    FORKING,
    FRESH,
    FRESH_MARKER,
    REPLAY,
    TAKE,
    Closing,
    Handle,
    Parked,
    Terms,
)
from harness.tracking.policies import POLICIES

if TYPE_CHECKING:
    from harness.ledger.writer import LedgerWriter


class Pool:
    """The parked runners of this process, least recently parked first, under the policies of the kinds it
    keeps (picked once, here)."""

    def __init__(
        self,
        writer: LedgerWriter,
        capacity: int = 1,
        kinds: tuple[str, ...] = ("vllm",),
    ):
        self.writer, self.capacity = writer, capacity
        self.policies = {kind: POLICIES[kind] for kind in kinds}
        self.warm: dict[str, Parked] = {}
        self.inherited: list[Parked] = []  # a forked child's: its parent's, never touched (see _forked)
        self.strays: weakref.WeakSet[threading.Thread] = weakref.WeakSet()  # threads earlier tests left
        _pools.add(self)
        # registered after its writer's (which holds its lock over a fork), so it runs before that one
        mine = weakref.ref(self)
        os.register_at_fork(before=lambda: _forking(mine()))

    def keeps(self, kind: str) -> bool:
        """Whether reuse of ``kind`` (``vllm``, ``hf``) is on."""
        return kind in self.policies

    def holds(self, runner: Any, test: Terms) -> bool:
        return any(p.handle.runner is runner for p in (*self.warm.values(), *test.held.values()))

    def drop(self, runner: Any, test: Terms) -> None:
        """Forget a parked runner its owner stops after all (a second shutdown): it is not handed on."""
        for kept in (self.warm, test.held):
            for key in [k for k, parked in kept.items() if parked.handle.runner is runner]:
                del kept[key]

    def replayable(self, test: Terms) -> bool:
        """Whether what ``test`` was handed is still here for a replay: engines held for it, or runners a
        replay may take that it was given."""
        return bool(test.held) or any(
            p.policy.in_replay(p, test) and p.handle.runner in test.given for p in self.warm.values()
        )

    # --- park and take -------------------------------------------------------------------------------

    def park(self, handle: Handle, test: Terms) -> bool:
        """Keep ``handle`` for the next start of its key (its kind's policy decides when it is checked);
        False (its owner stops it) when it is refused, or when its runner is parked already (stopped again
        while parked: its owner means it, and it is not handed on)."""
        if self.holds(handle.runner, test):
            self.drop(handle.runner, test)
            return False
        return self.policies[handle.kind].park(self, handle, test)

    def take(self, key: str, test: Terms, wanted: object = None) -> Any | None:
        """The runner parked under ``key``, handed on to ``test`` and recorded; None: start one.

        A parked runner that no longer serves is refused and stopped. With none of ``key``, a parked one the
        same by value but for what it names (its policy's ``near`` against ``wanted``) is refused, by name.
        In a replay, only what the failed try was handed (``held``) and what its policy lets a replay take.
        """
        if test.mode not in (TAKE, REPLAY):
            return None
        parked = test.held.get(key) if test.mode == REPLAY else None
        if parked is None:
            parked = self.warm.get(key)
            if parked is not None and test.mode == REPLAY and not parked.policy.in_replay(parked, test):
                parked = None
        if parked is None:
            if test.mode == TAKE and wanted is not None:
                self._refuse_near(wanted, test)
            return None
        return parked.policy.take(self, key, parked, test)

    def remove(self, key: str, parked: Parked, test: Terms) -> None:
        for kept in (self.warm, test.held):
            if kept.get(key) is parked:
                del kept[key]

    def hand_on(self, parked: Parked, test: Terms, checked_s: float) -> Any:
        handle, run = parked.handle, parked.handle.run
        test.handed += 1
        test.given.add(handle.runner)
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

    def _refuse_near(self, wanted: object, test: Terms) -> None:
        """A parked runner the same by value that this start may not have: why, by name."""
        for parked in self.warm.values():
            if (reason := parked.policy.near(parked.handle, wanted)) is not None:
                self.refused(parked.handle, reason, test)

    def keep(self, parked: Parked) -> None:
        if parked.handle.key in self.warm:  # two runners of one configuration were alive at once: the later
            self._shut(parked.handle.key)
        self.warm[parked.handle.key] = parked

    # --- refusals: built here, written here ----------------------------------------------------------

    def refusal(self, handle: Closing, test: Terms) -> str | None:
        """Why a closed engine may not be parked, in order: the test failed, it runs in a forked child, it
        asked for fresh engines, it served a replay, a thread it left can reach the engine; then the
        engine's own reasons (``Closing.refusal``); None when it may."""
        if test.failed:
            return FAILED
        if test.forked():  # a forked child's: its own engine or its parent's
            return "it is closed in a forked test's process, which ends without closing what it keeps"
        if test.mode == FRESH:
            return ASKED_FRESH
        return (
            self._reached(handle, test)
            or handle.refusal()
            or ("it served the replay of a failed test" if test.mode == REPLAY else None)
        )

    def _reached(self, handle: Closing, test: Terms) -> str | None:
        """Why a closed engine may not be kept while a thread its test (or an earlier one) left can still
        reach it (``leftovers``): one that sends a request later would send it to the next test's engine."""
        left = [t for t in leftovers.running() if t not in test.threads or t in self.strays]
        reaching = leftovers.reaching(handle.parts(), left) if left else []
        if not reaching:
            return None
        return (
            f"a thread its test left running can still reach it ({leftovers.describe(reaching)}): "
            "a request it sends later would reach the next test's engine"
        )

    def refused(self, handle: Handle, reason: str, test: Terms) -> None:
        run = handle.run
        self.writer.write(
            "reuse-refused",
            runner=run.id if run else None,
            fingerprint=handle.key,
            model=run.model if run else None,
            test=_name(test),
            reason=reason,
        )

    # --- the running test (the safety-net plugin's calls) --------------------------------------------

    def begin(self, test: Terms, previous: Terms | None = None, fresh: str | None = None) -> None:
        """``test`` (or another try of one) begins; what ``previous`` held for its replay goes unless this is
        that replay; ``fresh`` (why) shuts every warm engine down first (a ``FRESH`` or ``LEAVE`` test)."""
        if previous is not None and test.mode != REPLAY:
            self.let_go(previous)
        if fresh is not None:
            self.fresh_test(test, fresh)

    def failed(self, test: Terms) -> None:
        """``test`` failed: the engines it parked are shut down (those handed to it are held for its
        replay), and what it closes from now on is not parked (a test that fails may have left its engine
        in any state)."""
        test.failed = True
        for key in [k for k in self._engines() if self.warm[k].test == test.name]:
            parked = self.warm.pop(key)
            self.refused(parked.handle, FAILED, test)
            if parked.handle.runner in test.given and test.mode == TAKE:
                test.held[key] = parked
            else:
                parked.handle.stop()

    def ended(self, test: Terms) -> None:
        """``test``'s teardown is over: the threads it left running are strays from now on, and a parked
        engine one of them can reach is shut down (a thread started after the engine's close)."""
        self.strays.update(t for t in leftovers.running() if t not in test.threads)
        for key in self._engines():
            if (reason := self._reached(self.warm[key].handle, test)) is not None:
                self.refused(self.warm[key].handle, reason, test)
                self._shut(key)

    def let_go(self, test: Terms) -> None:
        """``test``'s outcome is known: the engines held for its replay are shut down."""
        while test.held:
            test.held.pop(next(iter(test.held))).handle.stop()

    def fresh_test(self, test: Terms, reason: str = FRESH_MARKER) -> None:
        """Fresh engines for ``test``: every warm engine is shut down, each with the reason (parked HF
        models stay: each take checks them)."""
        self.let_go(test)
        for key in self._engines():
            self.refused(self.warm[key].handle, reason, test)
            self._shut(key)

    # --- room, stops ---------------------------------------------------------------------------------

    def make_room(self, fraction: float | None, keep: int | None = None) -> None:
        """Before a start no parked runner serves (``fraction``: the share it declares): warm engines shut
        down, oldest first, until at most ``keep`` (default ``capacity - 1``) remain and their declared
        shares leave room for it; parked HF models dropped where that share is not free on a device (on
        the CPU, vLLM's KV cache is sized apart from what models keep)."""
        keep = self.capacity - 1 if keep is None else keep
        if keep < self.capacity:  # a start: engines held for a replay give way too
            self.let_go(running())
        while (engines := self._engines()) and (len(engines) > keep or not self._fits(fraction)):
            self._shut(engines[0])
        if fraction is not None and self._short_of(fraction):
            for key in [k for k in self.warm if k not in self._engines()]:
                self._shut(key)

    def _engines(self) -> list[str]:
        """The keys of the warm runners that take an engine place, oldest first."""
        return [k for k, parked in self.warm.items() if parked.policy.places]

    def _fits(self, fraction: float | None) -> bool:
        declared = sum(self.warm[k].handle.share or 0.0 for k in self._engines())
        return fraction is None or declared + fraction <= 1.0

    def _short_of(self, fraction: float) -> bool:
        platform = current().platform
        if len(self._engines()) == len(self.warm) or not platform.engine_memory_measured:
            return False
        return any(r.free_bytes < fraction * r.total_bytes for r in platform.memory().values())

    def _shut(self, key: str) -> None:
        self.warm.pop(key).handle.stop()

    def close(self, test: Terms | None = None) -> None:
        """Stop every parked runner (the session ends)."""
        self.let_go(test or running())
        while self.warm:
            self._shut(next(iter(self.warm)))

    def forked(self) -> None:
        """In a forked child: the parent's engines are kept out of reach, never stopped here (their
        finalizers would shut the parent's engine down) nor handed on (their sockets are the parent's);
        parked HF models stay (the child's copy)."""
        test = running()
        self.inherited.extend([*(self.warm.pop(k) for k in self._engines()), *test.held.values()])
        test.held = {}


def pool(kind: str | None = None) -> Pool | None:
    """This process's reuse pool (the context holds it) when it keeps ``kind`` (``vllm``, ``hf``; None:
    either), else None. The context, below this module, does not know the pool's type: this is its typed
    way in."""
    found: Pool | None = current().pool
    return found if found is not None and (kind is None or found.keeps(kind)) else None


def running() -> Terms:
    """The running test's terms, as the safety-net plugin set them on the context; outside a test (or with
    HF reuse alone, which keeps no per-test terms) one default ``Terms`` kept there."""
    context = current()
    if context.test is None:
        context.test = Terms()
    test: Terms = context.test
    return test


def _name(test: Terms) -> str | None:
    """The running test's node id: its terms', else the one the process context's owner names."""
    return test.name or current().owner.current().test


_pools: weakref.WeakSet[Pool] = weakref.WeakSet()


def _forking(pool: Pool | None) -> None:
    """A test forks (vLLM's ``fork_new_process_for_each_test``): engines only reuse keeps alive are shut
    down first, so they never block (or share memory with) what the child starts. A fork within a start
    (vLLM forking its engine process, ``Context.starting``) or outside a test leaves them."""
    if pool is None or getattr(current().starting, "active", False):
        return
    test = running()
    if not test.forked() and (pool._engines() or test.held) and current().owner.current().test:
        pool.fresh_test(test, FORKING)


def _forked() -> None:
    for pool in list(_pools):
        pool.forked()


os.register_at_fork(after_in_child=_forked)
