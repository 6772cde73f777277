"""Reference computations in a child process, so the test process stays free of CUDA.

vLLM starts its engine process with ``fork``, unless CUDA is already initialised in the calling process:
then it must ``spawn``, and the engine process imports torch and vLLM again: on the H200 that made engine
starts inside the pooling suite several times slower than in a plain script (docs/validation.md).
``in_child`` runs such a reference in a spawned child, recorded in this process's ledger as
this test's (or fixture's), and returns its result; on the CPU platform, where there is no CUDA to keep
out, it runs in this process.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from harness.config.settings import Settings
from harness.ledger.owner import Owner
from harness.ledger.writer import LedgerWriter
from harness.platform import detect
from harness.tracking import context, patches

T = TypeVar("T")


@dataclass(frozen=True)
class _Recording:
    """What the child needs to record as the caller would: its ledger, settings and owner."""

    settings: Settings
    ledger_dir: str | None
    owner: Owner


def _enter(recording: _Recording) -> None:
    """The child's process context: the same settings and ledger, and the caller's test and fixture."""
    here = context.Context(detect().platform, recording.settings)
    here.owner.worker = recording.owner.worker
    if recording.owner.test is not None:
        here.owner.enter_test(recording.owner.test, recording.owner.file or "")
    if recording.owner.fixture is not None:
        here.owner.enter_fixture(recording.owner.fixture, recording.owner.scope or "function")
    if recording.ledger_dir is not None:
        here.writer = LedgerWriter(
            recording.ledger_dir, worker=f"{recording.owner.worker}.child-{os.getpid()}"
        )
        patches.install()
    context.use(here)


def in_child(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``function(*args, **kwargs)`` in a spawned child on a GPU platform (in this process on the CPU).

    ``function`` must be importable by name (a module-level function) and its arguments and result
    picklable, as for any ``multiprocessing`` call; its exceptions are raised here.
    """
    here = context.current()
    if not here.platform.gpu:
        return function(*args, **kwargs)
    writer = here.writer
    recording = _Recording(
        here.settings, None if writer is None else str(writer.directory), here.owner.current()
    )
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn, initializer=_enter, initargs=(recording,)) as pool:
        return pool.submit(function, *args, **kwargs).result()
