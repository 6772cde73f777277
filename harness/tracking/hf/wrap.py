"""How ``PreTrainedModel.from_pretrained`` and ``SentenceTransformer`` are wrapped (``TARGETS``, for
``tracking.patches``): every load recorded and admitted; with HF reuse on, a parked model of the call's
configuration handed on, every new one parked at its load. And the loads the harness's own ``HfRunner``
makes (``load``, ``sentence_model``, ``tokenizer``, ``processor``).

What a session that loads no model does not pay for is imported by the wrappers when they first run (the
recording path, ``starts``, with them), as ``tracking.vllm.wrap`` does."""

from __future__ import annotations

import functools
import weakref
from typing import Any

from harness.tracking.hf.tables import PRETRAINED, SENTENCE_MODEL, WRAPPED


def patch_transformers(module) -> None:
    """Wrap ``PreTrainedModel.from_pretrained``: every load recorded; with HF reuse on, a parked model of
    the same load handed on instead, every new one parked."""
    from harness.tracking.fingerprints import normalise
    from harness.tracking.hf import key, parking
    from harness.tracking.starts import starting

    cls = module.PreTrainedModel
    original = cls.from_pretrained.__func__
    if getattr(original, "__harness__", False):
        return

    @functools.wraps(original)
    def from_pretrained(klass, *args, **kwargs):
        __tracebackhide__ = True
        found = normalise(original, (klass, *args), kwargs)
        config = key.config(found, klass, found.get(PRETRAINED))
        keyed = key.reuse_key(config) if parking.on() else None
        if keyed is not None and (kept := parking.take(keyed)) is not None:
            return kept
        with starting("hf", str(config.get(PRETRAINED)), config) as run:
            model = original(klass, *args, **kwargs)
        parking.park(keyed, model, run)
        return model

    from_pretrained.__harness__ = True  # type: ignore[attr-defined]
    cls.from_pretrained = classmethod(from_pretrained)


def patch_sentence_transformers(module) -> None:
    """Wrap ``SentenceTransformer``: every load recorded; with HF reuse on, a parked model of the same load
    handed on by ``__new__`` (its ``__init__`` then skipped), every new one parked."""
    from harness.tracking.fingerprints import normalise
    from harness.tracking.hf import key, parking
    from harness.tracking.starts import starting

    cls = module.SentenceTransformer
    original = cls.__init__
    if getattr(original, "__harness__", False):
        return
    original_new = cls.__new__
    handed: weakref.WeakSet = weakref.WeakSet()  # kept models __new__ returned: their __init__ is skipped

    def configured(klass, args, kwargs) -> dict:
        found = normalise(original, (None, *args), kwargs)
        return key.config(found, klass, found.get(SENTENCE_MODEL))

    @functools.wraps(original_new)
    def __new__(klass, *args, **kwargs):
        if (
            parking.on()
            and (kept := parking.take(key.reuse_key(configured(klass, args, kwargs)))) is not None
        ):
            handed.add(kept)
            return kept
        return original_new(klass) if original_new is object.__new__ else original_new(klass, *args, **kwargs)

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        __tracebackhide__ = True
        if self in handed:
            handed.discard(self)
            return
        config = configured(type(self), args, kwargs)
        keyed = key.reuse_key(config) if parking.on() else None
        with starting("hf", str(config.get(SENTENCE_MODEL)), config) as run:
            original(self, *args, **kwargs)
        parking.park(keyed, self, run)

    __init__.__harness__ = True  # type: ignore[attr-defined]
    cls.__new__ = __new__
    cls.__init__ = __init__


TARGETS = tuple(
    (*where, wrapper)
    for where, wrapper in zip(WRAPPED, (patch_transformers, patch_sentence_transformers), strict=True)
)


def load(device: str, auto_cls: Any, model: str, **kwargs: Any) -> Any:
    """``auto_cls.from_pretrained`` (None: ``AutoModelForCausalLM``) and the move to ``device`` as one
    recorded start, so the weights and, on a GPU, this process's CUDA context appear inside it
    (``device_map`` would do it in one call, but needs accelerate). The ``from_pretrained`` inside is the
    same start, not another; with HF reuse on, a parked model of the same load is handed on instead."""
    from harness.tracking.fingerprints import normalise
    from harness.tracking.hf import key, parking
    from harness.tracking.starts import starting

    if auto_cls is None:
        from transformers import AutoModelForCausalLM

        auto_cls = AutoModelForCausalLM
    config = key.config(normalise(auto_cls.from_pretrained, (model,), kwargs), auto_cls, model, device=device)
    keyed = key.reuse_key(config)  # the load inside is nested in this start, so it is decided here
    if parking.on() and (kept := parking.take(keyed)) is not None:
        return kept
    with starting("hf", model, config) as run:
        loaded = auto_cls.from_pretrained(model, **kwargs).to(device)
    parking.park(keyed, loaded, run)
    return loaded


def sentence_model(model: str, cross_encoder: bool, **options: Any) -> Any:
    """A ``SentenceTransformer`` (wrapped: recorded, and with HF reuse on handed on) or a ``CrossEncoder``
    (its ``from_pretrained`` loads recorded) of ``model``."""
    from sentence_transformers import CrossEncoder, SentenceTransformer

    return (CrossEncoder if cross_encoder else SentenceTransformer)(model, **options)


def tokenizer(model: str, trust_remote_code: bool) -> Any:
    """``AutoTokenizer``'s tokenizer of ``model``."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)


def processor(model: str, trust_remote_code: bool) -> Any:
    """``AutoProcessor``'s processor of ``model`` (a text model's is its tokenizer)."""
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(model, trust_remote_code=trust_remote_code)
