"""Foreign runners: ``vllm.LLM``, ``PreTrainedModel.from_pretrained`` and ``SentenceTransformer`` are
wrapped when the suite first imports them (a meta-path hook), so suites with their own conftest are counted
without the harness paying for those imports. Each wrapper takes the one recording path,
``starts.starting``.

Tracking never breaks the suite: a target that cannot be wrapped (the library moved or changed it) is
a ``not-tracked`` finding, never an exception from the user's import, and ``harness doctor`` says so
before a run.
"""

from __future__ import annotations

import ast
import functools
import importlib.abc
import importlib.util
import inspect
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from harness.tracking.context import current

VLLM_DEFAULT_UTILIZATION = 0.92  # vllm.LLM's default, used when the signature cannot be read


def _patch_vllm(module) -> None:
    # when the suite imports vLLM, not before
    from harness.tracking.starts import learn, reuse_key, starting, vllm_configuration
    from harness.tracking.vllm_engine import state, watch_engine

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
        pool = current().pool
        if pool is not None and klass is cls and args + tuple(kwargs):  # copy/pickle pass none
            try:
                config, arguments, variables = vllm_configuration(original, (None, *args), kwargs)
            except TypeError:  # arguments LLM itself refuses: its __init__ says so
                config = None
            engine = (
                None if config is None else pool.take(reuse_key(config, args, kwargs), arguments, variables)
            )
            if engine is not None:
                handed.add(engine)
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
        fraction = float(config.get("gpu_memory_utilization", default))
        ranks = int(config.get("tensor_parallel_size", 1)) * int(config.get("pipeline_parallel_size", 1))
        devices = tuple(range(ranks))
        pool = current().pool
        if pool is not None:  # warm engines go first: reuse never puts a new engine beside them
            pool.make_room(fraction)
        if current().shelf is not None:  # kept HF models go where the engine needs their memory
            current().shelf.make_room(fraction)
        with starting("vllm", str(config.get("model")), config, fraction=fraction, devices=devices) as run:
            original(self, *args, **kwargs)
        learn(variables)
        if run is not None:
            watch_engine(self, run)
        if pool is not None:
            pool.track(self, run, state(self), reuse_key(config, args, kwargs), arguments, variables)

    __init__.__harness__ = True  # type: ignore[attr-defined]
    cls.__new__ = staticmethod(__new__)
    cls.__init__ = __init__


def _patch_vllm_server(module) -> None:
    """``AsyncLLM``: the engine ``vllm serve`` builds (in a process a fixture spawned, like vLLM's
    ``RemoteOpenAIServer``), from a ``VllmConfig`` rather than arguments."""
    from harness.tracking.starts import starting

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
            _not_tracked(
                TARGETS[module.__name__], f"its VllmConfig changed ({type(error).__name__}: {error})"
            )
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
    return model.model, config, cache.gpu_memory_utilization, ranks


def _watch_shutdown(engine, run) -> None:
    """Record the stop at the engine's own ``shutdown`` (``vllm serve`` calls it on its way out), or when
    the engine is collected."""
    engine.shutdown = run.stopping(engine.shutdown)
    run.watch(engine)


def _patch_transformers(module) -> None:
    from harness.tracking.starts import fingerprint, normalise, starting

    cls = module.PreTrainedModel
    original = cls.from_pretrained.__func__
    if getattr(original, "__harness__", False):
        return

    @functools.wraps(original)
    def from_pretrained(klass, *args, **kwargs):
        __tracebackhide__ = True
        config = normalise(original, (klass, *args), kwargs)
        config["class"] = klass.__name__
        shelf = current().shelf
        key = None if shelf is None else fingerprint("hf", config)
        if key is not None and (kept := shelf.take(key)) is not None:
            return kept
        model_name = str(config.get("pretrained_model_name_or_path"))
        with starting("hf", model_name, config) as run:
            model = original(klass, *args, **kwargs)
        if run is not None:
            run.watch(model)
            if key is not None:
                shelf.park(key, model, run)
        return model

    from_pretrained.__harness__ = True  # type: ignore[attr-defined]
    cls.from_pretrained = classmethod(from_pretrained)


def _patch_sentence_transformers(module) -> None:
    from harness.tracking.starts import fingerprint, normalise, starting

    cls = module.SentenceTransformer
    original = cls.__init__
    if getattr(original, "__harness__", False):
        return
    original_new = cls.__new__
    handed: weakref.WeakSet = weakref.WeakSet()  # kept models __new__ returned: their __init__ is skipped

    def key(klass, args, kwargs) -> tuple[dict, str | None]:
        config = normalise(original, (None, *args), kwargs)
        config["class"] = klass.__name__
        return config, None if current().shelf is None else fingerprint("hf", config)

    @functools.wraps(original_new)
    def __new__(klass, *args, **kwargs):
        shelf = current().shelf
        if shelf is not None and (kept := shelf.take(key(klass, args, kwargs)[1])) is not None:
            handed.add(kept)
            return kept
        return original_new(klass) if original_new is object.__new__ else original_new(klass, *args, **kwargs)

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        __tracebackhide__ = True
        if self in handed:
            handed.discard(self)
            return
        config, fingerprinted = key(type(self), args, kwargs)
        with starting("hf", str(config.get("model_name_or_path")), config) as run:
            original(self, *args, **kwargs)
        if run is not None:
            run.watch(self)
            if fingerprinted is not None:
                current().shelf.park(fingerprinted, self, run)

    __init__.__harness__ = True  # type: ignore[attr-defined]
    cls.__new__ = __new__
    cls.__init__ = __init__


class Target(NamedTuple):
    """A runner class the harness wraps: where the library defines it and which method starts it."""

    module: str
    attribute: str
    method: str
    patch: Callable[[Any], None]

    @property
    def package(self) -> str:
        return self.module.split(".")[0]

    @property
    def label(self) -> str:
        return f"{self.package}.{self.attribute}"

    def wrapped(self, cls: type) -> bool:
        return getattr(getattr(cls, self.method, None), "__harness__", False)


TARGETS = {
    target.module: target
    for target in (
        Target("vllm.entrypoints.llm", "LLM", "__init__", _patch_vllm),
        Target("vllm.v1.engine.async_llm", "AsyncLLM", "__init__", _patch_vllm_server),
        Target("transformers.modeling_utils", "PreTrainedModel", "from_pretrained", _patch_transformers),
        Target("sentence_transformers", "SentenceTransformer", "__init__", _patch_sentence_transformers),
    )
}


class _PostImport(importlib.abc.MetaPathFinder):
    """Patches a target module right after the suite's own import executes it."""

    def find_spec(self, name, path=None, target=None):
        if name not in TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_module(module):
            execute(module)
            _apply(TARGETS[name], module)

        loader.exec_module = exec_module
        return spec


def _apply(target: Target, module) -> None:
    """Wrap the target; a library that changed shape is a finding, never an error in the user's import."""
    try:
        target.patch(module)
    except Exception as error:  # whatever the library's new shape raises, the suite's import goes on
        _not_tracked(target, f"{target.module} changed ({type(error).__name__}: {error})")


def _not_tracked(target: Target, why: str) -> None:
    ledger = current().writer
    if ledger is not None:
        ledger.write(
            "finding",
            type="not-tracked",
            message=f"{target.label} is not tracked: {why}; its runners are neither recorded nor admitted "
            "(harness doctor shows what the harness finds in the installed library)",
        )


def check_untracked() -> None:
    """A ``not-tracked`` finding for each target class the suite loaded from a module the import hook
    does not watch: the library moved it. (A failed wrap in the watched module is reported by ``_apply``.)
    """
    for target in TARGETS.values():
        if target.module in sys.modules or target.package not in sys.modules:
            continue
        for name, module in list(sys.modules.items()):
            found = getattr(module, "__dict__", {}).get(target.attribute)
            if name.split(".")[0] == target.package and isinstance(found, type) and not target.wrapped(found):
                _not_tracked(target, f"it is loaded from {name}, the harness wraps it in {target.module}")
                break


def installed_targets() -> dict[str, str]:
    """What ``harness doctor`` says of each target, read from the installed source without importing it."""
    return {target.label: _static(target) for target in TARGETS.values()}


def _static(target: Target) -> str:
    spec = importlib.util.find_spec(target.package)  # a top-level name: found, not executed
    if spec is None or not spec.submodule_search_locations:
        return "not installed"
    path = Path(next(iter(spec.submodule_search_locations)), *target.module.split(".")[1:])
    source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    if not source.is_file():
        return f"not tracked: {target.module} not found (the library moved it)"
    if target.attribute not in _names(source):
        return f"not tracked: {target.module} has no {target.attribute} (the library moved it)"
    return f"tracked ({target.module}.{target.attribute})"


def _names(source: Path) -> set[str]:
    """Names a module defines or imports at its top level."""
    names = set()
    for node in ast.parse(source.read_bytes()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


_hook = _PostImport()


def installed() -> bool:
    """Whether the import hook is in place (a module wrapped twice would record each start twice)."""
    return _hook in sys.meta_path


def install() -> importlib.abc.MetaPathFinder:
    """Instrument foreign runners: now for modules already imported, at first import for the rest.
    Returns the import hook."""
    if _hook not in sys.meta_path:
        sys.meta_path.insert(0, _hook)
    for name, target in TARGETS.items():
        if name in sys.modules:
            _apply(target, sys.modules[name])
    return _hook
