"""The vLLM adapter: the one module of the harness that knows vLLM's modules and internals. How
``vllm.LLM`` and ``AsyncLLM`` are wrapped (``TARGETS``, for ``tracking.patches``), what an engine's reuse
key holds (its arguments, the environment that changes an engine, a local model's files), and how a live
engine is stopped, parked for reuse (``Engine``: the reuse pool's handle of an engine, ``reuse.Handle``),
checked, reset and released; the public calls the harness's own ``VllmRunner`` makes.
``tests/unit/test_architecture.py`` keeps vLLM's names out of every other module.

A hand-off never changes an outcome: an engine is parked only when it is alive, idle, awake and reset
within a time limit, and when nothing a reset cannot undo happened to it (watched as it happens: code run
in its workers, a level-2 sleep, a request sampled without its own seed, stats counting); its state at
start (configuration, tokenizer, generation defaults, weight version) is compared before it is handed on.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import hashlib
import inspect
import json
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from harness.platform import cuda_fork, masks
from harness.tracking import reuse
from harness.tracking.context import current
from harness.tracking.reuse import ASKED_FRESH, FRESH

if TYPE_CHECKING:  # every recording session imports this module (patches): the recording path and the
    # memory policy are imported where vLLM is, as its wrappers first need them
    from harness.tracking.starts import Run


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


_began: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # LLM -> Started (reuse on)
_stops: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # LLM -> its engine's real stop
_uses: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # LLM -> Use
_warned: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # LLM -> the warnings its start emitted
# LLMs being decided or refused: a second shutdown meanwhile (vLLM's monitor thread shuts a dead engine
# down again) only stops them, with no second decision
_deciding: weakref.WeakSet = weakref.WeakSet()
_deciding_lock = threading.Lock()


VLLM_DEFAULT_UTILIZATION = 0.92  # vllm.LLM's default, used when the signature cannot be read


def patch_llm(module) -> None:
    """Wrap ``vllm.LLM``: every start recorded and admitted; with reuse on, a warm engine of the call's
    configuration handed on instead (``__new__``), every new one tracked by the pool."""
    from harness.tracking.starts import starting

    cls = module.LLM
    original = cls.__init__
    if getattr(original, "__harness__", False):
        return
    parameter = inspect.signature(original).parameters.get("gpu_memory_utilization")
    default = VLLM_DEFAULT_UTILIZATION if parameter is None else parameter.default
    handed: weakref.WeakSet = weakref.WeakSet()  # LLMs the pool handed on, whose __init__ runs next
    previous_new = cls.__new__

    def __new__(klass, *args, **kwargs):
        """With reuse on, ``LLM(...)`` of a configuration the pool keeps warm is that warm LLM."""
        pool = reuse.pool("vllm")
        if pool is not None and klass is cls and args + tuple(kwargs):  # copy/pickle pass none
            try:
                config, arguments, variables = vllm_configuration(original, (None, *args), kwargs)
            except TypeError:  # arguments LLM itself refuses: its __init__ says so
                config = None
            engine = None
            if config is not None:
                key = reuse_key(config, args, kwargs)
                objects = objects_by_argument(original, (None, *args), kwargs)
                engine = pool.take(key, Started(None, "", key, arguments, variables, objects=objects))
            if engine is not None:
                handed.add(engine)
                if (use := _uses.get(engine)) is not None:
                    use.parked_at = None  # in use again
                _warn_again(engine)
                return engine
        if previous_new is object.__new__:  # object's takes no arguments
            return object.__new__(klass)
        return previous_new(klass, *args, **kwargs)

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        __tracebackhide__ = True
        if self in handed:  # a warm engine handed on by __new__: already built
            handed.discard(self)
            return
        config, arguments, variables = vllm_configuration(original, (self, *args), kwargs)
        fraction = declared_share(config.get("gpu_memory_utilization", default), config)
        ranks = int(config.get("tensor_parallel_size", 1)) * int(config.get("pipeline_parallel_size", 1))
        devices = tuple(range(ranks))
        keeper = reuse.pool()  # warm engines go first: reuse never puts a new engine beside them (nor
        if keeper is not None:  # HF models where the engine needs their memory)
            keeper.make_room(fraction)
        pool = reuse.pool("vllm")
        with (
            starting("vllm", str(config.get("model")), config, fraction=fraction, devices=devices) as run,
            cuda_fork.engine_start(current().platform.name == "cuda", functools.partial(_cuda_fork, run)),
        ):
            if pool is None:
                original(self, *args, **kwargs)
            else:  # what it warns is warned again to each test it is handed to, which runs no __init__
                with warnings.catch_warnings(record=True) as warned:
                    warnings.simplefilter("always")  # every one, whatever this test's filters
                    original(self, *args, **kwargs)
                _warned[self] = warned
        learn(variables)
        if run is not None:
            watch_engine(self, run)
        if pool is not None:
            objects = objects_by_argument(original, (self, *args), kwargs)
            key, fresh = reuse_key(config, args, kwargs), pool.mode == FRESH
            _began[self] = Started(run, state(self), key, arguments, variables, fresh, objects)
            _warn_again(self)  # under this test's filters, once the engine is tracked

    __init__.__harness__ = True  # type: ignore[attr-defined]
    cls.__new__ = staticmethod(__new__)
    cls.__init__ = __init__


def _cuda_fork(run: Run | None, message: str) -> None:
    """A ``cuda-fork`` finding (``harness.platform.cuda_fork``) on the start's runner and test."""
    if run is not None:
        run.writer.write("finding", type="cuda-fork", runner=run.id, test=run.owner.test, message=message)


def _warn_again(llm) -> None:
    """The warnings ``llm``'s start emitted, emitted again under the current filters (a test may expect
    one with ``pytest.warns``; ``-W error`` raises it as a fresh start would)."""
    for message in _warned.get(llm, ()):
        warnings.warn_explicit(message.message, message.category, message.filename, message.lineno)


def patch_server(module) -> None:
    """``AsyncLLM``: the engine ``vllm serve`` builds (in a process a fixture spawned, like vLLM's
    ``RemoteOpenAIServer``), from a ``VllmConfig`` rather than arguments."""
    from harness.tracking.starts import not_tracked, starting

    cls = module.AsyncLLM
    original = cls.__init__
    if getattr(original, "__harness__", False):
        return

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        __tracebackhide__ = True
        try:
            model, config, fraction, ranks = _served(kwargs.get("vllm_config", args[0] if args else None))
        except Exception as error:  # vLLM moved a field: the server starts, unrecorded, with a finding
            not_tracked("vllm.AsyncLLM", f"its VllmConfig changed ({type(error).__name__}: {error})")
            original(self, *args, **kwargs)
            return
        with starting("vllm", model, config, fraction=fraction, devices=tuple(range(ranks))) as run:
            original(self, *args, **kwargs)
        if run is not None:
            _watch_shutdown(self, run)

    __init__.__harness__ = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


def declared_share(value, config: dict) -> float:
    """The share of each device an engine declares. vLLM 0.34 leaves ``gpu_memory_utilization`` unset by
    default and resolves it at start: 1.0 where its extensible KV cache is on (the default on CUDA and
    ROCm: it sizes the cache from the memory it measures free), vLLM's 0.92 elsewhere."""
    if value is not None:
        return float(value)
    extensible = config.get("enable_extensible_kv_cache")
    if extensible is None:
        extensible = current().platform.extensible_kv_cache
    return 1.0 if extensible else VLLM_DEFAULT_UTILIZATION


def _served(vllm_config) -> tuple[str, dict, float, int]:
    """Model, configuration (for the fingerprint), declared fraction and ranks of an ``AsyncLLM``."""
    model, cache, parallel = vllm_config.model_config, vllm_config.cache_config, vllm_config.parallel_config
    ranks = parallel.tensor_parallel_size * parallel.pipeline_parallel_size
    config = {
        "class": "AsyncLLM",
        "model": model.model,
        "runner": model.runner_type,
        "dtype": str(model.dtype),
        "max_model_len": model.max_model_len,
        "gpu_memory_utilization": cache.gpu_memory_utilization,
        "tensor_parallel_size": parallel.tensor_parallel_size,
        "pipeline_parallel_size": parallel.pipeline_parallel_size,
    }
    extensible = {"enable_extensible_kv_cache": getattr(cache, "enable_extensible_kv_cache", None)}
    return model.model, config, declared_share(cache.gpu_memory_utilization, extensible), ranks


def _watch_shutdown(engine, run) -> None:
    """Record the stop at the engine's own ``shutdown`` (``vllm serve`` calls it on its way out), or when
    the engine is collected."""
    engine.shutdown = run.stopping(engine.shutdown)
    run.watch(engine)


_set_by_vllm: dict[str, str] = {}  # variables vLLM set itself while building an engine, and to what

# what changes an engine besides its arguments and vLLM's own list (``vllm.envs.environment_variables``):
# device masks (``platform.masks.VARIABLES``), and the libraries vLLM builds on
PREFIXES = ("VLLM_", "HF_", "PYTORCH_", "NCCL_")


# variables that change no engine and differ between tests of one session: pytest's and xdist's own, the
# harness's per-test ones, the shell's
NOT_ENGINE = frozenset(("PYTEST_CURRENT_TEST", "_", "PWD", "OLDPWD", "SHLVL", "COLUMNS", "LINES"))
NOT_ENGINE_PREFIXES = ("PYTEST_XDIST_", "HARNESS_")


def _read_by_vllm() -> frozenset[str]:
    """The variables vLLM reads, from its own list where the loaded vLLM has one."""
    envs = sys.modules.get("vllm.envs")
    listed = getattr(envs, "environment_variables", None)
    return frozenset(listed if isinstance(listed, dict) else ()) | frozenset(masks.VARIABLES)


def keyed_environment() -> dict[str, str]:
    """Every variable of this process that may change an engine: all of them, less those known not to
    (``NOT_ENGINE``) and those vLLM set itself (``learn``) while they keep the value it gave them. vLLM,
    torch, Triton and the libraries below read variables while an engine is built and in its processes
    (a ``TRITON_*`` or torch precision switch): a start's configuration as much as its arguments."""
    return {
        name: value
        for name, value in sorted(os.environ.items())
        if name not in NOT_ENGINE
        and not name.startswith(NOT_ENGINE_PREFIXES)
        and _set_by_vllm.get(name) != value
    }


def environment(keyed: dict[str, str] | None = None) -> dict[str, str]:
    """Of ``keyed_environment()``, the variables vLLM lists and those of the libraries it builds on, which
    the ledger records by value (the rest are in the key by digest)."""
    names = _read_by_vllm()
    keyed = keyed_environment() if keyed is None else keyed
    return {name: value for name, value in keyed.items() if name in names or name.startswith(PREFIXES)}


def learn(before: dict[str, str]) -> None:
    """After vLLM built an engine: the variables set or changed since ``before`` (its
    ``keyed_environment()``) are vLLM's own (it forces ``VLLM_WORKER_MULTIPROC_METHOD=spawn``, for one),
    not the suite's."""
    for name, value in keyed_environment().items():
        if before.get(name) != value:
            _set_by_vllm[name] = value


def vllm_configuration(function, args: tuple, kwargs: dict) -> tuple[dict, str, dict[str, str]]:
    """A ``vllm.LLM`` call's configuration (``normalise``, the local model's place and files, the
    ``environment`` vLLM reads when any is set, and a digest of the other variables), the fingerprint of
    its arguments alone, and every keyed variable."""
    from harness.tracking.starts import fingerprint, normalise

    config = normalise(function, args, kwargs)
    for name in ("model", "tokenizer"):
        if (local := _local(config.get(name))) is not None:
            config[f"{name}_files"] = local
    arguments = fingerprint("vllm", config)
    keyed = keyed_environment()
    variables = environment(keyed)
    if variables:
        config["environment"] = variables
    if switched := precision():
        config["torch_precision"] = switched
    others = {name: value for name, value in keyed.items() if name not in variables}
    if others:
        config["other_environment"] = hashlib.sha256(repr(sorted(others.items())).encode()).hexdigest()[:12]
    return config, arguments, keyed


def precision() -> str | None:
    """This process's float32 matmul precision where a test switched it from torch's ``highest``: an engine
    process forked from here inherits it (TF32 matmuls change float32 results), so a start under another
    switch is another configuration. None where torch is not loaded or the switch is torch's default."""
    torch = sys.modules.get("torch")
    read = getattr(torch, "get_float32_matmul_precision", None)
    switched = read() if callable(read) else "highest"
    return None if switched == "highest" else str(switched)


def _local(path: object) -> str | None:
    """A local model's absolute place and the identity of its files (``starts.local_files``): the same
    relative path elsewhere, or files changed in place, are another model. None for a hub name."""
    from harness.tracking.starts import local_files

    return local_files(path)


def reuse_key(config: dict, args: tuple, kwargs: dict) -> str:
    """The reuse pool's key of a start: its fingerprint (data by value: vLLM's ``*Config`` objects built
    afresh in each call match), and the identity of each object in the arguments that is not data (a
    callable, an opaque object): two that print alike are the same only if they are one object."""
    from harness.tracking.starts import fingerprint

    objects = [id(v) for v in _objects([*args, *kwargs.values()])]
    key = fingerprint("vllm", config)
    return key if not objects else f"{key}-{hashlib.sha256(repr(objects).encode()).hexdigest()[:8]}"


def objects_by_argument(function, args: tuple, kwargs: dict) -> dict[str, list[int]]:
    """Per argument name, the identities of the objects in it that are not data (see ``reuse_key``)."""
    try:
        bound = inspect.signature(function).bind(*args, **kwargs).arguments
    except TypeError:
        return {}
    found = {name: [id(v) for v in _objects([value])] for name, value in bound.items() if name != "self"}
    return {name: ids for name, ids in found.items() if ids}


def _objects(values: list, depth: int = 0) -> list[Any]:
    """The objects within ``values`` (lists, tuples, dicts, data's fields) that are not data."""
    from harness.tracking.starts import is_data

    found: list[Any] = []
    for value in values:
        if isinstance(value, _PLAIN_SCALARS):
            continue
        if depth > 8:  # a structure that deep is not configuration: taken as it is
            found.append(value)
        elif isinstance(value, list | tuple | set | frozenset):
            found += _objects(list(value), depth + 1)
        elif isinstance(value, dict):
            found += _objects([*value.keys(), *value.values()], depth + 1)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            found += _objects([getattr(value, f.name, None) for f in dataclasses.fields(value)], depth + 1)
        elif not is_data(value):
            found.append(value)
    return found


_PLAIN_SCALARS = (str, int, float, bool, type(None))

# the classes ``tracking.patches`` wraps where vLLM defines them: (module, class, method, wrapper)
TARGETS = (
    ("vllm.entrypoints.llm", "LLM", "__init__", patch_llm),
    ("vllm.v1.engine.async_llm", "AsyncLLM", "__init__", patch_server),
)


def watch_engine(llm, run: Run) -> None:
    """vLLM 0.32's LLM has no shutdown: callers stop ``llm.llm_engine.engine_core`` or drop the LLM.

    Both end in the engine-core client's ``shutdown``; wrapping it on the instance records explicit
    stops, and a finalizer on the LLM shuts the client down (idempotent in vLLM) and records the stop.
    With reuse on, an explicit ``shutdown`` (vLLM's ``VllmRunner.__exit__``) parks the engine in the pool
    instead, unless the pool refuses it.
    A vLLM without those internals falls back to the LLM's lifetime, with a finding saying so: the
    user's ``LLM(...)`` has already built a working engine and must not raise here.
    """

    reference = weakref.ref(llm)

    def shutdown(*args, **kwargs):
        engine = reference()
        if engine is not None and _park(engine, functools.partial(stop, *args, **kwargs)):
            return None
        return stop(*args, **kwargs)

    try:
        client = llm.llm_engine.engine_core
        stop = run.stopping(client.shutdown)
        client.shutdown = shutdown
    except AttributeError as error:
        run.watch(llm)
        run.writer.write(
            "finding",
            type="not-tracked",
            runner=run.id,
            test=run.owner.test,
            message=f"vllm.LLM internals moved ({error}): the stop of {run.label()} is recorded when the "
            "LLM is collected, not when its engine shuts down",
        )
        return
    _stops[llm] = stop
    weakref.finalize(llm, stop).atexit = False
    if reuse.pool("vllm") is not None:
        _watch_use(llm, client)


def _watch_use(llm, client) -> None:
    """Note, as they happen, the uses of ``llm`` that no reset undoes (where this vLLM has the method)."""
    use = _uses[llm] = Use()
    engine = llm.llm_engine

    def add_request(add, request, *args, **kwargs):
        use.requests += 1
        params = getattr(request, "sampling_params", None)
        if getattr(getattr(params, "sampling_type", None), "name", "") == "RANDOM":
            use.random = True
        return add(request, *args, **kwargs)

    def collective_rpc(rpc, method, *args, **kwargs):
        if callable(method) or not str(method).startswith("get_"):  # vLLM's own reads are get_*
            use.rpc = getattr(method, "__name__", str(method))
        return rpc(method, *args, **kwargs)

    def sleep(asleep, level: int = 1, *args, **kwargs):
        use.deep_sleep = use.deep_sleep or level >= 2
        return asleep(level, *args, **kwargs)

    def start_profile(start, *args, **kwargs):
        use.profiling = True
        return start(*args, **kwargs)

    def stop_profile(stop, *args, **kwargs):
        use.profiling = False
        return stop(*args, **kwargs)

    for owner, name, watcher in (
        (client, "add_request", add_request),
        (engine, "collective_rpc", collective_rpc),
        (engine, "sleep", sleep),
        (engine, "start_profile", start_profile),
        (engine, "stop_profile", stop_profile),
    ):
        if (method := getattr(owner, name, None)) is not None:
            setattr(owner, name, functools.partial(watcher, method))


def close(llm, timeout: float | None) -> bool:
    """The harness's own runner closes ``llm``: parked (True) or shut down (False)."""
    stop = _stops.get(llm)
    if stop is None:  # not watched (vLLM's internals moved): stopped as it is
        llm.llm_engine.engine_core.shutdown(timeout=timeout)
        return False
    if _park(llm, functools.partial(stop, timeout=timeout), own=True):
        return True
    stop(timeout=timeout)
    return False


def _park(llm, stop: Callable[[], object], own: bool = False) -> bool:
    """Park ``llm`` in the reuse pool instead of stopping it; False when there is no pool or it refuses.

    The pool stops a parked engine later with ``stop``, the shutdown its owner asked for.
    """
    pool = reuse.pool("vllm")
    if pool is None:
        return False
    with _deciding_lock:
        if llm in _deciding:
            return False
        _deciding.add(llm)
    if pool.holds(llm):  # stopped again while parked: its owner means it
        pool.drop(llm)
        return False
    parked = pool.park(Engine(llm, _began.get(llm), stop, _unparkable(llm, own) or _left_by_error()))
    if parked:  # handed on later, closed again then: decided anew
        _deciding.discard(llm)
        if (use := _uses.get(llm)) is not None:
            use.parked_at = use.requests
    return parked


@dataclass(eq=False)
class Engine:
    """The reuse pool's handle of a closed engine (a ``reuse.Handle``): checked at its park (what its
    close knows against it, the pool's reason, a reset, its state against its start's), again before each
    hand-on (``alive``), and stopped with the shutdown its owner asked for."""

    runner: Any  # the LLM
    began: Started | None
    stopping: Callable[[], object]  # its owner's shutdown
    refused: str | None = None  # what its close already knows against it (``_unparkable``, an exception)
    kind: ClassVar[str] = "vllm"
    parked_in_use: ClassVar[bool] = False

    @property
    def key(self) -> str:
        return self.began.key if self.began is not None else ""

    @property
    def run(self) -> Run | None:
        return self.began.run if self.began is not None else None

    @property
    def share(self) -> float | None:
        return self.run.need.fraction if self.run is not None else None

    def parts(self) -> tuple[object, ...]:
        engine = getattr(self.runner, "llm_engine", None)
        return (self.runner, engine, getattr(engine, "engine_core", None))

    def refusal(self, against: str | None) -> str | None:
        llm = self.runner
        return parking_refusal(self.began, self.refused or against, lambda: reset(llm), lambda: state(llm))

    def differs(self, wanted: object) -> str | None:
        return differs(self.began, wanted)

    def in_use(self) -> bool:
        return False  # closed by its owner

    def alive(self) -> str | None:
        return alive(self.runner)

    def stop(self) -> None:
        self.stopping()
        self.runner = None  # the pool's was the last reference: the engine goes before its memory is checked
        release()


def parking_refusal(
    began: Started | None, against: str | None, reset: Callable[[], str | None], now: Callable[[], str]
) -> str | None:
    """Why an engine that began as ``began`` may not be parked, in order: ``against`` (its close's or the
    pool's reason), a start under the fresh_engine marker, a start the harness did not see, what ``reset``
    cannot undo, a state (``now()``) other than at its start; None when it may."""
    if against is not None:
        return against
    if began is not None and began.fresh:
        return ASKED_FRESH
    if began is None:
        return "the harness did not see it start"
    reason = reset()
    if reason is None and (state_now := now()) != began.state:
        return f"its {changed(began.state, state_now)} changed while in use (no reset undoes that)"
    return reason


def changed(before: str, now: str) -> str:
    """What differs between two states: the names of a JSON object's parts that differ (``state`` names
    them: configuration, tokenizer, ...), else "configuration"."""
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


def differs(began: Started | None, wanted: object) -> str | None:
    """Why a start (``wanted``) of the same arguments by value as an engine's (``began``) may not have it:
    the variables that differ (with their values where vLLM lists them, ``environment``) and the arguments
    holding another object; None for a start of other arguments."""
    if not isinstance(wanted, Started) or began is None or wanted.base is None or began.base != wanted.base:
        return None
    started, asked = began.environment, wanted.environment
    names = sorted(n for n in started.keys() | asked.keys() if started.get(n) != asked.get(n))
    shown = environment({**started, **asked})
    variables = [f"{n}={started.get(n)!r} -> {asked.get(n)!r}" if n in shown else n for n in names]
    objects = wanted.objects
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


def _left_by_error() -> str | None:
    """An engine shut down while an exception is handled (its ``with`` block raised) is not handed on."""
    error = sys.exc_info()[1]
    return None if error is None else f"it was closed by an exception ({type(error).__name__})"


def _unparkable(llm, own: bool) -> str | None:
    """Why an engine may not be parked at all, whatever its state; None when it may.

    An engine running in this process is torn down by what vLLM's conftest runs after ``shutdown``
    (``cleanup_dist_env_and_memory``). vLLM's conftest waits for memory after ``__exit__`` and before the
    next ``LLM(...)`` on ROCm (used below ``1 - gpu_memory_utilization``), and between tests on any GPU
    with ``VLLM_TEST_CLEAN_GPU_MEMORY=1`` (below 10 %): a parked engine's memory would hold those waits,
    so there the harness's own runner parks and a suite's own runner does not. An engine counting stats
    (``disable_log_stats=False``) would carry its counters over.
    """
    try:
        engine = llm.llm_engine
        in_process = not type(engine.engine_core).__name__.endswith("MPClient")
        engine.vllm_config  # noqa: B018 (what reset and state read)
    except AttributeError as error:
        return f"vllm.LLM internals moved ({error})"
    if in_process:
        return "its engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0): cleanup would end it"
    if getattr(engine, "log_stats", False):
        return "it counts stats (disable_log_stats=False): its counters would carry over"
    use = _uses.get(llm)
    if use is not None and (why := _used(use)) is not None:
        return why
    if own:
        return None
    platform = current().platform
    if platform.waits_for_release:
        said = platform.display_name
        return f"vLLM's conftest waits on {said} for its memory to be given back after each runner"
    if platform.gpu and os.environ.get("VLLM_TEST_CLEAN_GPU_MEMORY") == "1":
        return "VLLM_TEST_CLEAN_GPU_MEMORY=1: vLLM's conftest waits between tests for a nearly empty GPU"
    return None


def _used(use: Use) -> str | None:
    if use.rpc is not None:
        return (
            f"code ran in its workers through collective_rpc or apply_model ({use.rpc}): weights may differ"
        )
    if use.deep_sleep:
        return "it slept at level 2: its weights were discarded"
    if use.random:
        return "a request sampled without a seed of its own: its random state moved on from its seed"
    return None


def alive(llm) -> str | None:
    """Why ``llm`` cannot serve another test (its engine died, or requests are unfinished); None if it can.

    Read from the client alone, with no call into the engine: it runs before every hand-on.
    """
    try:
        engine = llm.llm_engine
        resources = engine.engine_core.resources
        if resources.engine_dead:
            return "its engine died (vLLM marked it dead)"
        manager = resources.engine_manager
        for process in getattr(manager, "processes", ()):
            if not process.is_alive():
                return f"its engine process exited (pid {process.pid}, exit code {process.exitcode})"
        if engine.has_unfinished_requests():
            return "requests were left unfinished in it"
        use = _uses.get(llm)
        if use is not None and use.parked_at is not None and use.requests != use.parked_at:
            return "a request reached it after its close (a thread of its test still used it)"
    except Exception as error:  # an engine that cannot say is not one to hand on
        return f"checking it failed: {type(error).__name__}: {error}"
    return None


def release() -> None:
    """After an engine is stopped and dropped: collect, empty caches, clean vLLM's distributed state, and
    on ROCm wait for the driver to give memory back (what a runner's own teardown does after a stop)."""
    from harness.memory.waits import settle
    from harness.platform import allocator

    gc.collect()
    allocator.empty_cache()
    cleanup()
    context = current()
    settle(context.platform, context.settings)


def state(llm) -> str:
    """What a test can change in an engine that a reset does not put back, compared as a whole rather than
    listed: its configuration by value (every field of ``vllm_config`` and the configs below it, so an
    in-place edit of a limit read per request shows), the ``LLM``'s and its engine's attributes (one
    replaced or added: a method patched on the instance, a tokenizer swapped), its tokenizer, its
    generation defaults and its weight version ("" where vLLM keeps no ``vllm_config`` there: parking is
    then refused, see ``_unparkable``)."""
    from harness.tracking.starts import _json_safe

    try:
        engine = llm.llm_engine
        config = engine.vllm_config
        model = config.model_config
    except AttributeError:
        return ""
    parts: dict[str, Any] = {
        "configuration": hashlib.sha256(json.dumps(_json_safe(config), sort_keys=True).encode()).hexdigest(),
        "generation config": repr(
            (getattr(model, "override_generation_config", None), getattr(model, "generation_config", None))
        ),
        "tokenizer": _tokenizer(llm),
        "LLM attribute": _attributes(llm, RESET_ATTRIBUTES),
        "engine attribute": _attributes(engine, ()),
    }
    version = getattr(engine, "get_weight_version", None)
    if version is not None:
        try:
            parts["weight version"] = str(version())
        except Exception as error:  # an engine that cannot say is compared by what it says
            parts["weight version"] = type(error).__name__
    return json.dumps(parts)


RESET_ATTRIBUTES = ("default_sampling_params",)  # what ``_reset`` puts back itself


def _attributes(obj: object, reset: tuple[str, ...]) -> dict[str, str]:
    """``obj``'s own attributes: plain values by value, the rest by identity (replaced: another object)."""
    return {
        name: repr(value) if isinstance(value, _PLAIN_SCALARS) else f"{type(value).__qualname__}@{id(value)}"
        for name, value in sorted(getattr(obj, "__dict__", {}).items())
        if name not in reset
    }


TOKENIZER_FIELDS = ("padding_side", "truncation_side", "model_max_length", "chat_template", "add_bos_token")


def _tokenizer(llm) -> str:
    """A digest of what a test can change in the engine's tokenizer in place."""
    try:
        tokenizer = llm.get_tokenizer()
    except Exception as error:  # skip_tokenizer_init, or a tokenizer that cannot be read
        return type(error).__name__
    fields = [repr(getattr(tokenizer, name, None)) for name in TOKENIZER_FIELDS]
    fields.append(repr(getattr(tokenizer, "special_tokens_map", None)))
    try:
        fields.append(str(len(tokenizer)))
    except TypeError:
        pass
    return hashlib.sha256("\n".join(fields).encode()).hexdigest()


def reset(llm) -> str | None:
    """Undo what a test may leave in a live engine, within ``reuse_check_s``; the reason it cannot be
    handed on, or None. A reset that does not finish in time is refused (the engine is shut down)."""
    limit = current().settings.reuse_check_s
    outcome: list[str | None] = []
    worker = threading.Thread(target=lambda: outcome.append(_reset(llm)), name="harness-reset", daemon=True)
    worker.start()
    worker.join(limit)
    if not outcome:
        return f"its reset did not finish in {limit:g} s (reuse_check_s)"
    return outcome[0]


def _reset(llm) -> str | None:
    """Wakes a paused or sleeping engine, removes LoRA adapters, empties its caches (prefix, multimodal,
    encoder) and forgets the cached default sampling parameters (read again from the generation config).
    Each only where the engine has the feature: vLLM raises on ``list_loras`` without LoRA."""
    if (why := alive(llm)) is not None:
        return why
    engine = llm.llm_engine
    config = engine.vllm_config
    try:
        if engine.is_sleeping() and not llm.wake_up():  # level 0 (paused) needs no enable_sleep_mode
            return "it was left asleep and did not wake up fully"
        for adapter in sorted(engine.list_loras()) if config.lora_config is not None else ():
            if not engine.remove_lora(adapter):
                return f"LoRA adapter {adapter} could not be removed"
        if config.cache_config.enable_prefix_caching and not llm.reset_prefix_cache():
            return "its prefix cache could not be reset (requests still running)"
        if getattr(config.model_config, "is_multimodal_model", False):
            llm.reset_mm_cache()
            getattr(engine, "reset_encoder_cache", lambda: None)()
        use = _uses.get(llm)
        if (use is not None and use.profiling) or getattr(engine, "_profile_session_active", False):
            engine.stop_profile()
        getattr(getattr(llm, "request_counter", None), "reset", lambda: None)()  # request ids from 0 again
    except Exception as error:  # an engine that fails here is not one to hand on
        return f"resetting it failed: {type(error).__name__}: {error}"
    llm.default_sampling_params = None
    return None


def new_llm(**kwargs) -> Any:
    """``vllm.LLM(**kwargs)``: with reuse on, a warm engine of this configuration (``patch_llm``)."""
    from vllm import LLM

    return LLM(**kwargs)


def sampling(**kwargs) -> Any:
    """``vllm.SamplingParams(**kwargs)``."""
    from vllm import SamplingParams

    return SamplingParams(**kwargs)


def beam_search(**kwargs) -> Any:
    """``vllm.sampling_params.BeamSearchParams(**kwargs)``."""
    from vllm.sampling_params import BeamSearchParams

    return BeamSearchParams(**kwargs)


def cleanup() -> None:
    """vLLM's ``cleanup_dist_env_and_memory`` where the installed vLLM has it."""
    try:
        from vllm.distributed import cleanup_dist_env_and_memory
    except ImportError:  # a vLLM that moved it: the caller's collection is what is left to do
        return
    cleanup_dist_env_and_memory()
