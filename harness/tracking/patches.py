"""Foreign runners: ``vllm.LLM``, ``PreTrainedModel.from_pretrained`` and ``SentenceTransformer`` are
wrapped when the suite first imports them (a meta-path hook), so suites with their own conftest are counted
without the harness paying for those imports. Each wrapper takes the one recording path,
``starts.starting``.
"""

from __future__ import annotations

import functools
import importlib.abc
import inspect
import sys

from harness.errors import HarnessError
from harness.tracking.starts import normalise, starting
from harness.tracking.vllm_engine import watch_engine

VLLM_DEFAULT_UTILIZATION = 0.92  # vllm.LLM's default, used when the signature cannot be read


def _patch_vllm(module) -> None:
    cls = module.LLM
    original = cls.__init__
    if getattr(original, "__harness__", False):
        return
    parameters = inspect.signature(original).parameters
    default = parameters.get("gpu_memory_utilization")
    default = VLLM_DEFAULT_UTILIZATION if default is None else default.default

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        __tracebackhide__ = True
        config = normalise(original, (self, *args), kwargs)
        fraction = float(config.get("gpu_memory_utilization", default))
        ranks = int(config.get("tensor_parallel_size", 1)) * int(config.get("pipeline_parallel_size", 1))
        devices = tuple(range(ranks))
        with starting("vllm", str(config.get("model")), config, fraction=fraction, devices=devices) as run:
            original(self, *args, **kwargs)
        if run is not None:
            watch_engine(self, run)

    __init__.__harness__ = True
    cls.__init__ = __init__


def _patch_transformers(module) -> None:
    cls = module.PreTrainedModel
    original = cls.from_pretrained.__func__
    if getattr(original, "__harness__", False):
        return

    @functools.wraps(original)
    def from_pretrained(klass, *args, **kwargs):
        config = normalise(original, (klass, *args), kwargs)
        config["class"] = klass.__name__
        model_name = str(config.get("pretrained_model_name_or_path"))
        with starting("hf", model_name, config) as run:
            model = original(klass, *args, **kwargs)
        if run is not None:
            run.watch(model)
        return model

    from_pretrained.__harness__ = True
    cls.from_pretrained = classmethod(from_pretrained)


def _patch_sentence_transformers(module) -> None:
    cls = module.SentenceTransformer
    original = cls.__init__
    if getattr(original, "__harness__", False):
        return

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        config = normalise(original, (self, *args), kwargs)
        config["class"] = type(self).__name__
        with starting("hf", str(config.get("model_name_or_path")), config) as run:
            original(self, *args, **kwargs)
        if run is not None:
            run.watch(self)

    __init__.__harness__ = True
    cls.__init__ = __init__


PATCHES = {
    "vllm.entrypoints.llm": _patch_vllm,
    "transformers.modeling_utils": _patch_transformers,
    "sentence_transformers": _patch_sentence_transformers,
}


class _PostImport(importlib.abc.MetaPathFinder):
    """Patches a target module right after the suite's own import executes it."""

    def find_spec(self, name, path=None, target=None):
        if name not in PATCHES:
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
            _apply(name, module)

        loader.exec_module = exec_module
        return spec


def _apply(name: str, module) -> None:
    try:
        PATCHES[name](module)
    except (AttributeError, TypeError, ValueError) as error:
        raise HarnessError(
            f"cannot instrument {name} ({type(error).__name__}: {error}); use --no-harness"
        ) from None


_hook = _PostImport()


def install() -> None:
    """Instrument foreign runners: now for modules already imported, at first import for the rest."""
    if _hook not in sys.meta_path:
        sys.meta_path.insert(0, _hook)
    for name in PATCHES:
        if name in sys.modules:
            _apply(name, sys.modules[name])
