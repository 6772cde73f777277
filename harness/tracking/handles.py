"""The terms of the reuse seam (``tracking.reuse``), below the pool and its policies: the modes a test may be
in, the handles the pool parks (``Handle``, with ``Closing`` or ``Opened`` members: a handle implements
only its own kind's), a parked handle (``Parked``), the running test's terms (``Terms``, the safety-net
plugin's), what a policy is (``Policy``) and what it asks of the pool (``Keeper``)."""

from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from harness.tracking.runs import Run

FRESH_MARKER = "the next test asked for a fresh engine (fresh_engine marker)"
ASKED_FRESH = "the test asked for a fresh engine (fresh_engine marker)"
FAILED = "its test failed"  # what it closes, and what it parked, is not kept
FORKING = "a test forks a process: warm engines give way to what its child starts, as without reuse they "
FORKING += "would be gone"

# what the running test may do with the pool (``Terms.mode``), one value per try:
TAKE = "take"  # take warm runners and leave what it closes warm (the default)
LEAVE = "leave-only"  # start its own, and leave them warm after it (the safety net's fresh retry)
FRESH = "fresh"  # start its own and leave nothing (the fresh_engine marker)
REPLAY = "replay"  # take only the engines its failed try was handed (``held``), leave nothing


class Handle(Protocol):
    """A runner the pool parks, of either kind: what the pool reads and asks of every handle."""

    @property
    def kind(
        self,
    ) -> str: ...  # "vllm" or "hf", as the ledger names it: it picks the handle's policy

    @property
    def key(self) -> str: ...  # its configuration's fingerprint: what a start asks for

    @property
    def run(
        self,
    ) -> Run | None: ...  # its recorded start (None: the harness did not record it)

    @property
    def share(
        self,
    ) -> float | None: ...  # the share of each device it declared (None: none declared)

    @property
    def runner(self) -> Any: ...  # what a take hands on: the ``LLM``, the model

    def alive(self) -> str | None:
        """Before each hand-on: why it can no longer serve (it died, a test changed it), or None."""

    def stop(self) -> None:
        """Shut it down and give its memory back (the pool's was the last reference to it)."""


class Closing(Handle, Protocol):
    """A runner parked when its owner closes it (a vLLM engine): checked at its park."""

    def refusal(self) -> str | None:
        """Its own reason not to be kept (what its close knows, what no reset undoes), or None; what can be
        reset is reset first. Asked only when the pool has no reason of its own."""

    def differs(self, wanted: object) -> str | None:
        """At a start of another key (``wanted``: that start's record): why it may not have this one when
        it is the same by value but for what this names; None when it is another configuration."""

    def parts(self) -> tuple[object, ...]:
        """What a thread that can still use it holds (the runner and its engine)."""


class Opened(Handle, Protocol):
    """A runner parked at its start, while its test uses it (an HF model): checked at each take."""

    def in_use(self) -> bool:
        """Its test still uses it: not handed on, not refused (the new start goes on beside it)."""


class Parked:
    """A handle in the pool, its kind's policy, the test that parked it (None: parked in use) and what its
    park's checks took. A plain class: every recording session imports this module (through the adapter),
    and a dataclass's generated methods cost each one their compilation."""

    __slots__ = ("check_s", "handle", "policy", "test")

    def __init__(self, handle: Any, policy: Policy, test: str | None = None, check_s: float = 0.0) -> None:
        self.handle, self.policy, self.test, self.check_s = (
            handle,
            policy,
            test,
            check_s,
        )


class Terms:
    """The running test's terms with the pool, one per try: the safety-net plugin makes, fails and ends it;
    every park and take is given it (``running()`` finds it for the adapters). ``failed``: what it closes is
    not parked; ``given``: the runners handed to it (``handed``: how many); ``held``: engines handed to it
    that it failed on or closed with a refusal, kept for its replay until its outcome is known; ``pid``:
    the process it began in (a forked child's is another); ``threads``: those alive when it began."""

    __slots__ = ("failed", "given", "handed", "held", "mode", "name", "pid", "threads")

    def __init__(
        self,
        name: str | None = None,
        mode: str = TAKE,
        held: dict[str, Parked] | None = None,
    ):
        self.name, self.mode = name, mode
        self.failed = False
        self.handed = 0
        self.given: weakref.WeakSet[Any] = weakref.WeakSet()
        self.held: dict[str, Parked] = {} if held is None else held
        self.pid = os.getpid()
        self.threads = set(threading.enumerate())

    def forked(self) -> bool:
        """Whether this is a forked child of the process the test began in."""
        return self.pid != os.getpid()


class Policy:
    """What the pool does with one kind of handle (the default: a closed one, ``Closed``)."""

    places = True  # takes one of the pool's engine places: counted by make_room, gives way to fresh tests

    def park(self, pool: Keeper, handle: Any, test: Terms) -> bool:
        raise NotImplementedError

    def take(self, pool: Keeper, key: str, parked: Parked, test: Terms) -> Any | None:
        raise NotImplementedError

    def in_replay(self, parked: Parked, test: Terms) -> bool:
        """Whether a replay of ``test`` may take ``parked`` from the warm ones."""
        return False

    def near(self, handle: Any, wanted: object) -> str | None:
        """Why a start of another key the same by value may not have ``handle``; None: another one."""
        return None


class Keeper(Protocol):
    """What a policy asks of the pool (``reuse.Pool``): its capacity, its refusal (built there, in order),
    and keeping, handing on, removing and recording what the policy decides."""

    @property
    def capacity(self) -> int: ...

    def refusal(self, handle: Closing, test: Terms) -> str | None: ...

    def refused(self, handle: Handle, reason: str, test: Terms) -> None: ...

    def keep(self, parked: Parked) -> None: ...

    def hand_on(self, parked: Parked, test: Terms, checked_s: float) -> Any: ...

    def remove(self, key: str, parked: Parked, test: Terms) -> None: ...

    def make_room(self, fraction: float | None, keep: int | None = None) -> None: ...
