"""The pool's policy for each kind of runner, picked once by its kind (``POLICIES``), as pytest-xdist picks
its scheduler: ``Closed`` for vLLM engines, parked when their owner closes them and checked then, ``Open`` for
HF models, parked at their load and checked at each take."""

from __future__ import annotations

import time
from typing import Any

from harness.tracking.handles import TAKE, Closing, Keeper, Opened, Parked, Policy, Terms


class Closed(Policy):
    """vLLM engines: parked at their close, after every check; handed on once; held for a replay when the
    test they were handed to refused or failed them."""

    def park(self, pool: Keeper, handle: Closing, test: Terms) -> bool:
        checking = time.monotonic()
        reason = pool.refusal(handle, test)
        if reason is not None:
            pool.refused(handle, reason, test)
            if handle.runner in test.given and test.mode == TAKE and not test.forked():
                test.held[handle.key] = Parked(handle, self)
                return True  # stopped once its test's outcome is known (``let_go``)
            return False
        pool.keep(Parked(handle, self, test.name, time.monotonic() - checking))
        pool.make_room(None, keep=pool.capacity)
        return True

    def take(self, pool: Keeper, key: str, parked: Parked, test: Terms) -> Any | None:
        began = time.monotonic()
        pool.remove(key, parked, test)
        reason = parked.handle.alive()
        if reason is not None:
            pool.refused(parked.handle, reason, test)
            parked.handle.stop()
            return None
        return pool.hand_on(parked, test, time.monotonic() - began)

    def near(self, handle: Closing, wanted: object) -> str | None:
        return handle.differs(wanted)


class Open(Policy):
    """HF models: parked at their load as they are; at each take handed on while unused and unchanged (and
    parked still: handed on again), refused and dropped once changed. A replay may take them."""

    places = False

    def park(self, pool: Keeper, handle: Opened, test: Terms) -> bool:
        pool.keep(Parked(handle, self))
        return True

    def take(self, pool: Keeper, key: str, parked: Parked, test: Terms) -> Any | None:
        handle = parked.handle
        if handle.in_use():  # the start goes on beside it; the pool keeps the newer one
            return None
        began = time.monotonic()
        reason = handle.alive()
        if reason is not None:
            pool.remove(key, parked, test)
            pool.refused(handle, reason, test)
            handle.stop()
            return None
        return pool.hand_on(parked, test, time.monotonic() - began)

    def in_replay(self, parked: Parked, test: Terms) -> bool:
        return True


POLICIES: dict[str, Policy] = {"vllm": Closed(), "hf": Open()}
