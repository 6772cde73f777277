"""Every runner start lands in the ledger: ``starting(...)`` is the one path a start takes.

Whoever builds the runner (the harness's runners, or ``tracking.patches`` for foreign ones), this runs the
admission check, writes ``runner-start`` / ``runner-started`` / ``runner-failed``, keeps the runner as a
live holder and records its stop (explicit, or when the object is collected).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Iterator

from harness.errors import HarnessError, RunnerBlocked
from harness.ledger.writer import LedgerWriter
from harness.memory import admission
from harness.memory.waits import wait_for_memory
from harness.platform.base import GIB, Platform
from harness.tracking import compile_cache, leftovers
from harness.tracking.attribution import CHILD, FIXTURE
from harness.tracking.context import current
from harness.tracking.fingerprints import fingerprint
from harness.tracking.runs import Run


def adopt(context) -> LedgerWriter | None:
    """In a test's spawned process (no plugin configured it): record into that test's ledger, as that test,
    in ``<worker>.<pid>.jsonl``. Returns the context's writer, if any."""
    if context.writer is None and CHILD in os.environ:
        directory = context.owner.adopt(os.environ[CHILD])
        context.writer = LedgerWriter(directory, worker=f"{context.owner.worker}.{os.getpid()}")
    return context.writer


def not_tracked(label: str, why: str) -> None:
    """A ``not-tracked`` finding: runners of ``label`` (``vllm.LLM``) start unrecorded, and why."""
    ledger = current().writer
    if ledger is not None:
        ledger.write(
            "finding",
            type="not-tracked",
            message=f"{label} is not tracked: {why}; its runners are neither recorded nor admitted "
            "(harness doctor shows what the harness finds in the installed library)",
        )


@contextlib.contextmanager
def fixture_setup(key: object, name: str, scope: str) -> Iterator[None]:
    """A fixture's setup: what starts inside is attributed to it, and if the device grew beyond the release
    tolerance without a runner to account for it (a raw tensor, a model loaded some other way), the fixture
    itself is held until ``admission.release(key)`` at its teardown."""
    context = current()
    context.owner.enter_fixture(name, scope)
    owner = context.owner.current()
    holders_before = len(context.holders.on())
    before = {i: r.used_bytes for i, r in context.platform.memory().items()}
    outer = os.environ.get(FIXTURE) if CHILD in os.environ else None
    if CHILD in os.environ:  # a process it spawns (``vllm serve``) records its runners as this fixture's
        os.environ[FIXTURE] = f"{scope} {name}"
    try:
        yield
    finally:
        context.owner.leave_fixture()
        if CHILD in os.environ:
            if outer is None:
                os.environ.pop(FIXTURE, None)
            else:
                os.environ[FIXTURE] = outer
        grown = {i: r.used_bytes - before.get(i, r.used_bytes) for i, r in context.platform.memory().items()}
        held = {i: g for i, g in grown.items() if g > context.settings.release_tolerance_gib * GIB}
        # a fixture that started a runner is already held through that runner
        if held and len(context.holders.on()) == holders_before:
            context.holders.hold(
                admission.Holder(key, f"fixture `{name}`", owner, tuple(held), used_bytes=held)
            )


def _wait(need: admission.Need) -> None:
    platform = current().platform
    readings = platform.memory()
    wait_for_memory(
        platform,
        need.devices,
        per_device={i: readings[i].total_bytes - (need.bytes or 0) for i in need.devices},
        timeout_s=current().settings.memory_wait_timeout_s,
    )


def _overlap_finding(run: Run, message: str) -> None:
    run.writer.write(
        "finding", type="live-runner-overlap", runner=run.id, test=run.owner.test, message=message
    )


ERROR_LINES = 40  # a failed start's error keeps the end of its chain: the innermost cause is last


ERROR_CHARS = 4000


def cause(error: BaseException) -> str:
    """``Type: message`` of the error and each exception it came from, outermost first, bounded to the
    last lines: vLLM's start errors carry the reason in later lines (pydantic's ``1 validation error for
    VllmConfig`` names the field only below) or in a ``__cause__``."""
    parts: list[str] = []
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        text = str(link).rstrip()
        parts.append(f"{type(link).__name__}: {text}" if text else type(link).__name__)
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    lines = "\ncaused by: ".join(parts).splitlines()[-ERROR_LINES:]
    return "\n".join(lines)[-ERROR_CHARS:]


class _CallerFrames:
    """A generator context manager whose refusal to enter (a ``HarnessError``: a blocked start, memory
    that never came) shows the user's frames only, not contextlib's and the harness's."""

    def __init__(self, manager):
        self.manager = manager

    def __enter__(self):
        __tracebackhide__ = True
        try:
            return self.manager.__enter__()
        except HarnessError as error:
            raise error.with_traceback(None) from error.__cause__

    def __exit__(self, *exc_info):
        __tracebackhide__ = True
        return self.manager.__exit__(*exc_info)


def _caller_frames(factory):
    @functools.wraps(factory)
    def make(*args, **kwargs):
        return _CallerFrames(factory(*args, **kwargs))

    return make


@_caller_frames
@contextlib.contextmanager
def starting(
    kind: str,
    model: str,
    config: dict,
    *,
    fraction: float | None = None,
    devices: tuple[int, ...] = (0,),
) -> Iterator[Run | None]:
    """Admit, record and time one runner start; yields the ``Run`` (None when not recording or nested).

    ``fraction`` is the share of each device the runner declares (vLLM's ``gpu_memory_utilization``;
    on the CPU platform the device is NUMA node 0, the figure vLLM's CPU backend checks).
    """
    __tracebackhide__ = True
    threads = set(threading.enumerate())
    try:
        with _recorded(kind, model, config, fraction, devices) as run:
            yield run
    finally:  # what the runner started (vLLM's output and monitor threads) is its own, not a test's
        leftovers.runners_started(set(threading.enumerate()) - threads)


@contextlib.contextmanager
def _recorded(
    kind: str, model: str, config: dict, fraction: float | None, devices: tuple[int, ...]
) -> Iterator[Run | None]:
    __tracebackhide__ = True
    context = current()
    writer = context.writer or adopt(context)
    if writer is None or getattr(context.starting, "active", False):
        yield None
        return
    context.starting.active = True
    try:
        from harness.tracking import siblings  # where a runner starts: its ledger reader with it

        siblings.refresh(context)
        need, declared = _need(context.platform, fraction, devices)
        run = _announce(writer, kind, model, config, need, declared)
        began = time.monotonic()
        try:
            admission.admit(
                run.label(),
                run.need,
                holders=context.holders,
                memory=context.platform.memory,
                grace_s=context.settings.block_grace_s,
                wait=_wait,
                overlap=context.settings.overlap,
                warn=functools.partial(_overlap_finding, run),
            )
            cache = compile_cache.Snapshot.take() if kind == "vllm" else None  # after any wait: its own
            yield run
        except BaseException as error:
            _failed(run, error, time.monotonic() - began, context.holders)
            raise
        if cache is not None:
            run.compile = compile_cache.judge(
                cache, compile_cache.Snapshot.take(), compile_cache.compiles(config)
            )
        run.started(time.monotonic() - began)
    finally:
        context.starting.active = False


def _need(
    platform: Platform, fraction: float | None, devices: tuple[int, ...]
) -> tuple[admission.Need, int | None]:
    """What a runner declaring ``fraction`` of ``devices`` needs on the devices this process sees, and
    the bytes that fraction stands for."""
    totals = {d.index: d.total_bytes for d in platform.devices()}
    # more ranks than visible devices (the CPU has one; a pinned worker one GPU): account for what is
    # visible and let the runner itself refuse what it cannot have
    devices = tuple(d for d in devices if d in totals) or tuple(totals)[:1]
    declared = None
    if fraction is not None and devices:
        declared = int(fraction * min(totals[i] for i in devices))
    # vLLM's CPU backend checks node memory itself and fails at once; what it cannot see there is
    # another live engine, so on the CPU admission checks the declared fractions only
    measured = declared if platform.engine_memory_measured else None
    return admission.Need(devices=devices, bytes=measured, fraction=fraction), declared


def _announce(
    writer: LedgerWriter, kind: str, model: str, config: dict, need: admission.Need, declared: int | None
) -> Run:
    """The ``Run`` of a start, its ``runner-start`` event written before the runner is built."""
    run = Run(writer, kind, model, need.devices, need, declared)
    owner = run.owner
    writer.write(
        "runner-start",
        id=run.id,
        kind=kind,
        model=model,
        fingerprint=fingerprint(kind, config),
        config=config,
        **owner.fields(),
        devices=list(run.keys.values()),
        need_bytes=declared,
        fraction=need.fraction,
        mem_before=run.mem_before,
    )
    return run


def _failed(run: Run, error: BaseException, startup_s: float, holders: admission.Holders) -> None:
    """``runner-failed``; a start the admission check blocked is also a ``live-runner-overlap`` finding."""
    blocked = isinstance(error, RunnerBlocked)
    message = str(error).splitlines()[0] if str(error) else type(error).__name__
    run.writer.write(
        "runner-failed",
        id=run.id,
        startup_s=round(startup_s, 3),
        error=cause(error),
        blocked=blocked,
        holders=[h.describe() for h in holders.on(run.devices)] if blocked else [],
    )
    if blocked:
        run.writer.write(
            "finding", type="live-runner-overlap", runner=run.id, test=run.owner.test, message=message
        )
