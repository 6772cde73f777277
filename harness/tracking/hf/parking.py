"""Parking a loaded HF model: its handle (``Model``, a ``reuse.Opened`` handle), the take a load asks for
first (``take``) and the park after a load (``park``); the pool decides both under its ``Open`` policy."""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from harness.platform import allocator
from harness.tracking import reuse
from harness.tracking.hf import health

if TYPE_CHECKING:
    from harness.tracking.runs import Run


@dataclass(eq=False)
class Model:
    """An HF model the pool parks (a ``reuse.Opened`` handle): at its load, checked at each take."""

    key: str
    runner: Any  # the model
    run: Run
    digest: str
    modes: list[bool]  # each submodule's training flag at load
    kind: ClassVar[str] = "hf"
    share: ClassVar[float | None] = None  # it declares none: it gives way where a start's share is not free

    @classmethod
    def loaded(cls, key: str, model: Any, run: Run) -> Model:
        """The handle of ``model``, just loaded by ``run``."""
        return cls(key, model, run, health.digest(model), [m.training for m in model.modules()])

    def in_use(self) -> bool:
        return health.in_use(self)

    def alive(self) -> str | None:
        return health.changed(self)

    def stop(self) -> None:
        """Drop it: the memory it held goes back once its test has let it go too."""
        self.runner = None
        gc.collect()
        allocator.empty_cache()


def on() -> bool:
    """Whether HF reuse is on in this process (``reuse_hf``): a load is keyed, taken and parked."""
    return reuse.pool("hf") is not None


def take(key: str) -> Any | None:
    """The model parked under ``key``, handed on to the running test; None: load one (or HF reuse is off)."""
    pool = reuse.pool("hf")
    return None if pool is None else pool.take(key, reuse.running())


def park(key: str | None, model: Any, run: Run | None) -> None:
    """After ``run`` loaded ``model``: its collection recorded as its stop, and with HF reuse on (``key``)
    the model parked in the pool."""
    if run is None:
        return
    run.watch(model)
    if key is not None and (pool := reuse.pool("hf")) is not None:
        pool.park(Model.loaded(key, model, run), reuse.running())
