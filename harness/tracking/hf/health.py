"""Whether a parked HF model still serves: used by nothing but the pool (``in_use``), unchanged since its
load (``changed``, by its ``digest``: parameters and buffers by shape, dtype, device, storage, version
counter and sum, every submodule's hooks, its config and generation config)."""

from __future__ import annotations

import gc
import hashlib
import sys
import types
from typing import Any

from harness.tracking.hf.tables import CONFIGS, HOOKS

_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)


def in_use(kept: Any) -> bool:
    """Whether anything but the pool's handle (``kept``, a ``parking.Model``) and the model's own object
    graph (a module's bound methods, a cache keyed by it) references the model: then the test that loaded
    it may still use it."""
    # the handle's field and getrefcount's argument
    if sys.getrefcount(kept.runner) == 2:
        return False
    gc.collect()  # a dropped runner object in a cycle with the model refers to it until collected
    model = kept.runner
    graph = {id(model)}
    stack = [model]
    while stack:
        for referent in gc.get_referents(stack.pop()):
            # classes, modules and functions lead to globals, and from there to everything
            if id(referent) not in graph and gc.is_tracked(referent) and not isinstance(referent, _SHARED):
                graph.add(id(referent))
                stack.append(referent)
    inside = sum(1 for referrer in gc.get_referrers(model) if id(referrer) in graph)
    # the handle's field, this frame's ``model`` and getrefcount's argument
    return sys.getrefcount(model) - 3 - inside > 0


def changed(kept: Any) -> str | None:
    """Why the kept model may not be handed on (a test changed it), or None. The training mode is put
    back as it was at load first: ``SentenceTransformer.encode`` itself switches the model to eval."""
    modules = list(kept.runner.modules())
    if len(modules) != len(kept.modes):
        return "a test changed it (submodules were added or removed)"
    for module, mode in zip(modules, kept.modes, strict=True):
        module.training = mode
    try:
        now = digest(kept.runner)
    except Exception as error:  # a model that cannot be read is not one to hand on
        return f"reading its state failed: {type(error).__name__}: {error}"
    if now != kept.digest:
        return "a test changed it (its parameters, buffers, hooks or config differ from its load)"
    return None


def digest(model: Any) -> str:
    """A digest of what a test can change in a loaded model without reloading it."""
    import torch

    parts: list[Any] = []
    with torch.no_grad():
        tensors = [*model.named_parameters(), *model.named_buffers()]
        sums = [t.sum(dtype=torch.float64) for _, t in tensors]
        by_device: dict[Any, list[int]] = {}
        for i, total in enumerate(sums):
            by_device.setdefault(total.device, []).append(i)
        values: dict[int, float] = {}
        for indices in by_device.values():  # one transfer per device
            values.update(zip(indices, torch.stack([sums[i] for i in indices]).tolist(), strict=True))
    for i, (name, tensor) in enumerate(tensors):
        parts.append((name, str(tensor.dtype), tuple(tensor.shape), str(tensor.device), tensor.requires_grad))
        parts.append((tensor.data_ptr(), tensor._version, values[i]))
    for name, module in model.named_modules():
        parts.append((name, *(tuple(getattr(module, hooks, {})) for hooks in HOOKS)))
    for name in CONFIGS:
        as_json = getattr(getattr(model, name, None), "to_json_string", None)
        if as_json is not None:
            parts.append(as_json())
    return hashlib.sha256(repr(parts).encode()).hexdigest()
