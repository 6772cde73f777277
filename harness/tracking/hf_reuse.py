"""HF reuse (opt-in, ``reuse_hf = true``): an HF model loaded again with the same arguments in the same
worker is handed on instead of loaded again (``PreTrainedModel.from_pretrained`` and
``SentenceTransformer``, as ``tracking.patches`` wraps them, and the harness's ``HfRunner``).

A loaded model is parked in the reuse pool (``reuse.Pool``) as a ``Model`` handle, by its configuration
fingerprint, with a digest of its state at load: parameters and buffers (shape, dtype, device, storage,
version counter and sum), the hooks of every submodule, the model's config and generation config. Nothing
announces that its test is done with it, so it is parked at its load (its policy, ``reuse.Open``) and
checked at each take: handed on only when nothing but the pool references it and, its submodules' training
mode put back as loaded, its digest is unchanged; a model a test changed is refused (``reuse-refused``,
with the reason) and loaded again. The pool writes the hand-on (``runner-reused``), as for an engine.
"""

from __future__ import annotations

import gc
import hashlib
import sys
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from harness.platform import allocator

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
        return cls(key, model, run, digest(model), [m.training for m in model.modules()])

    def in_use(self) -> bool:
        return _in_use(self)

    def alive(self) -> str | None:
        return _changed(self)

    def stop(self) -> None:
        """Drop it: the memory it held goes back once its test has let it go too."""
        self.runner = None
        gc.collect()
        allocator.empty_cache()


_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)


def _in_use(kept: Model) -> bool:
    """Whether anything but the pool and the model's own object graph (a module's bound methods, a
    cache keyed by it) references the model: then the test that loaded it may still use it."""
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


def _changed(kept: Model) -> str | None:
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
        hooks = (
            module._forward_hooks,
            module._forward_pre_hooks,
            module._backward_hooks,
            getattr(module, "_backward_pre_hooks", {}),
        )
        parts.append((name, *(tuple(h) for h in hooks)))
    for name in ("config", "generation_config"):  # a generation config edited in place changes generate()
        as_json = getattr(getattr(model, name, None), "to_json_string", None)
        if as_json is not None:
            parts.append(as_json())
    return hashlib.sha256(repr(parts).encode()).hexdigest()
