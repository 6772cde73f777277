"""Every runner start lands in the ledger: ``starting(...)`` is the one path a start takes.

Whoever builds the runner (the harness's runners, or ``tracking.patches`` for foreign ones), this runs the
admission check, writes ``runner-start`` / ``runner-started`` / ``runner-failed``, keeps the runner as a
live holder and records its stop (explicit, or when the object is collected).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import inspect
import json
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from harness.errors import HarnessError, RunnerBlocked
from harness.ledger.writer import LedgerWriter
from harness.memory import admission
from harness.memory.waits import wait_for_memory
from harness.platform import allocator
from harness.platform.base import GIB, Platform
from harness.tracking import compile_cache
from harness.tracking.attribution import CHILD, FIXTURE
from harness.tracking.context import current

_starting = threading.local()  # a load inside a load (SentenceTransformer -> from_pretrained) counts once


def adopt(context) -> LedgerWriter | None:
    """In a test's spawned process (no plugin configured it): record into that test's ledger, as that test,
    in ``<worker>.<pid>.jsonl``. Returns the context's writer, if any."""
    if context.writer is None and CHILD in os.environ:
        directory = context.owner.adopt(os.environ[CHILD])
        context.writer = LedgerWriter(directory, worker=f"{context.owner.worker}.{os.getpid()}")
    return context.writer


def _device_keys(devices: tuple[int, ...]) -> dict[int, str]:
    known = {d.index: d.uuid for d in current().platform.devices()}
    return {i: known.get(i, str(i)) for i in devices}


def _used(keys: dict[int, str]) -> dict[str, int]:
    readings = current().platform.memory()
    return {uuid: readings[i].used_bytes for i, uuid in keys.items() if i in readings}


def _json_safe(value: Any) -> Any:
    """Config values as JSON, data by value: a dataclass (vLLM's ``*Config``) or pydantic model as its class
    and fields, an enum as its member, a set sorted, a path as text; any other object as its text without
    memory addresses (stable fingerprints; ``vllm_engine.reuse_key`` adds such objects' identity)."""
    try:
        return json.loads(json.dumps(value, default=as_data))
    except (ValueError, RecursionError):  # a cycle: its text alone
        return json.loads(json.dumps(value, default=_text))


def as_data(value: Any) -> Any:
    """``value`` as JSON-able data where it is data (see ``_json_safe``); else its text."""
    kind = type(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
        return {"__class__": kind.__qualname__, **fields}
    if callable(getattr(value, "model_dump", None)) and hasattr(kind, "model_fields"):  # pydantic
        return {"__class__": kind.__qualname__, **value.model_dump()}
    if isinstance(value, enum.Enum):
        return f"{kind.__qualname__}.{value.name}"
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return _text(value)


def is_data(value: Any) -> bool:
    """Whether ``as_data`` takes ``value`` by value (else it is an object, compared by identity)."""
    return (
        (dataclasses.is_dataclass(value) and not isinstance(value, type))
        or (callable(getattr(value, "model_dump", None)) and hasattr(type(value), "model_fields"))
        or isinstance(value, enum.Enum | set | frozenset | os.PathLike)
    )


def _text(value: Any) -> str:
    return re.sub(r" at 0x[0-9a-f]+", "", str(value))


def normalise(function, args: tuple, kwargs: dict) -> dict:
    """The call's arguments by parameter name, **kwargs flattened, values equal to defaults dropped.

    ``self``/``cls`` are left out: the instance is not built yet when a constructor is wrapped.
    """
    signature = inspect.signature(function)
    bound = signature.bind(*args, **kwargs)
    config = {}
    for name, value in bound.arguments.items():
        parameter = signature.parameters[name]
        if name in ("self", "cls"):
            continue
        if parameter.kind is parameter.VAR_KEYWORD:
            config.update(value)
        elif parameter.kind is parameter.VAR_POSITIONAL:
            if value:
                config[name] = list(value)
        elif value is not parameter.default and not (
            parameter.default is not parameter.empty and _equal(value, parameter.default)
        ):
            config[name] = value
    return _json_safe(config)


def _equal(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # tensors and arrays compare element-wise
        return False


SMALL_FILE = 1 << 20  # a local model's files up to this size are keyed by their content
MOST_FILES = 10_000  # a folder with more is keyed by those it lists first


def local_files(path: object) -> str | None:
    """A local model or checkpoint's absolute place and a digest of its files (each file's path below it,
    size and change time, and the content of small ones: ``config.json``, ``generation_config.json``, the
    tokenizer's), so rewritten files are another model; None when ``path`` is not a local path."""
    if not isinstance(path, str | os.PathLike) or not os.path.exists(path):
        return None
    where = os.path.abspath(path)
    digest = hashlib.sha256()
    try:
        if os.path.isdir(where):
            listed = sorted(
                os.path.join(folder, name) for folder, _, names in os.walk(where) for name in names
            )[:MOST_FILES]
        else:
            listed = [where]
        for file in listed:
            status = os.stat(file)
            digest.update(f"{os.path.relpath(file, where)} {status.st_size} {status.st_mtime_ns}\n".encode())
            if status.st_size <= SMALL_FILE:
                with open(file, "rb") as handle:
                    digest.update(hashlib.sha256(handle.read()).digest())
    except OSError as error:  # unreadable: its place and what stopped the walk
        digest.update(type(error).__name__.encode())
    return f"{where} {digest.hexdigest()[:12]}"


def fingerprint(kind: str, config: dict) -> str:
    return hashlib.sha256(json.dumps([kind, config], sort_keys=True).encode()).hexdigest()[:12]


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


def _children() -> set[int]:
    """This process's descendants: a vLLM engine core (and its workers) are started as children."""
    import psutil  # only where a runner starts: most sessions never pay its import

    return {child.pid for child in psutil.Process().children(recursive=True)}


class Run:
    """One tracked runner from its start to its stop.

    A runner is charged only with memory it holds: torch's reserved bytes in this process above their
    level at the start (an HF model), plus what the processes that appeared during its start use (a vLLM
    engine core), per process as NVML or amdsmi count it. The growth of this process's CUDA context
    (created at the first CUDA call, grown by library handles and kernels loaded on first use) is in
    neither: on the H200 it read as "not released" after clean HF stops (docs/memory.md).
    """

    def __init__(self, writer: LedgerWriter, kind: str, model: str, devices: tuple[int, ...], need, declared):
        self.writer, self.kind, self.model, self.devices, self.need = writer, kind, model, devices, need
        self.declared = declared  # bytes per device the runner declares, or None
        self.id = writer.new_id()
        self.owner = current().owner.current()
        self.keys = _device_keys(devices)
        self.mem_before = _used(self.keys)
        self.reserved_before = {i: allocator.reserved(i) for i in devices}
        self.children_before = _children()
        self.pids: set[int] = set()  # its engine processes, known once it has started
        self.stopped = False
        self.startup_s: float | None = None
        self.compile: str | None = None  # a vLLM start's compile caches: "warm", "cold" or None

    def label(self) -> str:
        return f"{self.kind} runner `{self.model}`"

    def held(self) -> dict[int, int]:
        """Bytes per visible device that this runner holds now (see the class)."""
        engines = current().platform.process_memory(self.pids) if self.pids else {}
        return {i: allocator.reserved(i) - self.reserved_before[i] + engines.get(i, 0) for i in self.devices}

    def started(self, startup_s: float) -> None:
        self.startup_s = round(startup_s, 3)
        context = current()
        context.starts, context.started_s = context.starts + 1, context.started_s + self.startup_s
        self.pids = _children() - self.children_before
        held = self.held()
        compiled: dict[str, Any] = {"compile": self.compile} if self.kind == "vllm" else {}
        self.writer.write(
            "runner-started",
            id=self.id,
            startup_s=round(startup_s, 3),
            mem_after_start=_used(self.keys),
            held_after_start={self.keys[i]: b for i, b in held.items()},
            **compiled,
        )
        current().holders.hold(
            admission.Holder(
                key=self.id,
                label=self.label(),
                owner=self.owner,
                devices=self.devices,
                used_bytes={i: max(0, b) for i, b in held.items()},
                fraction=self.need.fraction,
                declared_bytes=self.declared,
            )
        )

    def stop(self, began: float | None = None) -> None:
        """Record the stop once (explicit close, shutdown, or collection of the runner object).

        ``began`` is the ``time.monotonic()`` at which the runner's own teardown started, if it had one.
        """
        context = current()
        if self.stopped or context.writer is not self.writer:
            return
        self.stopped = True
        began = time.monotonic() if began is None else began
        context.holders.release(self.id)
        after = _used(self.keys)
        self.writer.write(
            "runner-stopped", id=self.id, teardown_s=round(time.monotonic() - began, 3), mem_after_stop=after
        )
        context.stopped(self)

    def stopping(self, stop: Callable[..., Any]) -> Callable[..., Any]:
        """``stop`` (a runner's own shutdown) that records this run's stop, timed from its call, however
        it ends."""

        def recorded(*args, **kwargs):
            began = time.monotonic()
            try:
                return stop(*args, **kwargs)
            finally:
                self.stop(began)

        return recorded

    def kept(self) -> dict[str, int]:
        """Bytes per device (by UUID) the runner still holds."""
        return {self.keys[i]: b for i, b in self.held().items()}

    def watch(self, obj: Any) -> None:
        """Record the stop when ``obj`` is collected; a runner alive at exit stays ``never-stopped``."""
        weakref.finalize(obj, self.stop).atexit = False


RELEASE_WAIT_S = 2.0


def check_released(wait_s: float = RELEASE_WAIT_S, poll_s: float = 0.1) -> None:
    """A "memory-not-released" finding for each stopped runner whose memory did not come back.

    Checked after the test (or fixture teardown) that stopped the runner, not at the stop itself: a runner's
    own teardown goes on after its engine or model is gone (garbage collection, emptying torch's caching
    allocator, the engine process being reaped), and memory needs those to come back. torch's cached but
    unreferenced blocks are given back first, so only memory something still references counts.
    """
    context = current()
    runs = context.take_stopped()
    if not runs:
        return
    allocator.empty_cache()
    tolerance = context.settings.release_tolerance_gib * GIB
    deadline = time.monotonic() + wait_s
    while any(kept > tolerance for run in runs for kept in run.kept().values()):
        if time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    writer = context.writer  # None, or another one: the session that stopped them has ended
    for run in runs:
        for uuid, kept in run.kept().items():
            if writer is not None and kept > tolerance and run.writer is writer:
                writer.write(
                    "finding",
                    type="memory-not-released",
                    runner=run.id,
                    test=run.owner.test,
                    message=f"{run.label()} from {run.owner.test} left {kept / GIB:.2f} GiB on {uuid} "
                    f"after its stop (tolerance {context.settings.release_tolerance_gib:g} GiB)",
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
    context = current()
    writer = context.writer or adopt(context)
    if writer is None or getattr(_starting, "active", False):
        yield None
        return
    _starting.active = True
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
        _starting.active = False


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
