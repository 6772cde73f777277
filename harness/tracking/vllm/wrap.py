"""How ``vllm.LLM`` and ``AsyncLLM`` are wrapped (``TARGETS``, for ``tracking.patches``): every start
recorded and admitted; with reuse on, a warm engine of the call's configuration handed on, every new one
watched for what no reset undoes and parked at its close. And the calls the harness's own ``VllmRunner``
makes (``new_llm``, ``sampling``, ``beam_search``)."""

from __future__ import annotations

import functools
import inspect
import warnings
import weakref
from typing import TYPE_CHECKING, Any

from harness.platform import cuda_fork
from harness.tracking import reuse
from harness.tracking.context import current
from harness.tracking.handles import FRESH
from harness.tracking.vllm import health, key, llms, parking
from harness.tracking.vllm.llms import Started, Use
from harness.tracking.vllm.tables import VLLM_DEFAULT_UTILIZATION, WRAPPED

if TYPE_CHECKING:
    from harness.tracking.runs import Run


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
                config, arguments, variables = key.vllm_configuration(original, (None, *args), kwargs)
            except TypeError:  # arguments LLM itself refuses: its __init__ says so
                config = None
            engine = None
            if config is not None:
                wanted = key.reuse_key(config, args, kwargs)
                objects = key.objects_by_argument(original, (None, *args), kwargs)
                engine = pool.take(
                    wanted, reuse.running(), Started(None, "", wanted, arguments, variables, objects=objects)
                )
            if engine is not None:
                handed.add(engine)
                if (use := llms.of(engine).use) is not None:
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
        config, arguments, variables = key.vllm_configuration(original, (self, *args), kwargs)
        fraction = key.declared_share(config.get("gpu_memory_utilization", default), config)
        ranks = int(config.get("tensor_parallel_size", 1)) * int(config.get("pipeline_parallel_size", 1))
        devices = tuple(range(ranks))
        keeper = reuse.pool()  # warm engines go first: reuse never puts a new engine beside them (nor
        if keeper is not None:  # HF models where the engine needs their memory)
            keeper.make_room(fraction)
        pool = reuse.pool("vllm")
        with (
            starting("vllm", str(config.get("model")), config, fraction=fraction, devices=devices) as run,
            cuda_fork.engine_start(current().platform.cuda_fork_guard, functools.partial(_cuda_fork, run)),
        ):
            if pool is None:
                original(self, *args, **kwargs)
            else:  # what it warns is warned again to each test it is handed to, which runs no __init__
                with warnings.catch_warnings(record=True) as warned:
                    warnings.simplefilter("always")  # every one, whatever this test's filters
                    original(self, *args, **kwargs)
                llms.of(self).warned = warned
        key.learn(variables)
        if run is not None:
            watch_engine(self, run)
        if pool is not None:
            objects = key.objects_by_argument(original, (self, *args), kwargs)
            fingerprint, fresh = key.reuse_key(config, args, kwargs), reuse.running().mode == FRESH
            llms.of(self).began = Started(
                run, health.state(self), fingerprint, arguments, variables, fresh, objects
            )
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
    for message in llms.of(llm).warned:
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
    return model.model, config, key.declared_share(cache.gpu_memory_utilization, extensible), ranks


def _watch_shutdown(engine, run) -> None:
    """Record the stop at the engine's own ``shutdown`` (``vllm serve`` calls it on its way out), or when
    the engine is collected."""
    engine.shutdown = run.stopping(engine.shutdown)
    run.watch(engine)


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
        if engine is not None and parking.park(engine, functools.partial(stop, *args, **kwargs)):
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
    llms.of(llm).stop = stop
    weakref.finalize(llm, stop).atexit = False
    if reuse.pool("vllm") is not None:
        _watch_use(llm, client)


def _watch_use(llm, client) -> None:
    """Note, as they happen, the uses of ``llm`` that no reset undoes (where this vLLM has the method)."""
    use = llms.of(llm).use = Use()
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


# the classes ``tracking.patches`` wraps where vLLM defines them: (module, class, method, wrapper)
TARGETS = tuple((*where, wrapper) for where, wrapper in zip(WRAPPED, (patch_llm, patch_server), strict=True))


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
