"""HF reuse (opt-in, ``reuse_hf = true``): an HF model loaded again with the same arguments in the same
worker is handed on instead of loaded again (``PreTrainedModel.from_pretrained`` and
``SentenceTransformer``, as ``tracking.patches`` wraps them).

A loaded model is kept on a shelf by its configuration fingerprint, with a digest of its state at load:
parameters and buffers (shape, dtype, device, storage, version counter and sum), the hooks of every
submodule and the model's config. It is handed on only when nothing but the shelf references it (the
test that loaded it is done with it) and, its submodules' training mode put back as loaded, its digest is
unchanged; a model a test changed is refused (``reuse-refused``, with the reason) and loaded again. A
hand-on is written as ``runner-reused``, like an engine the reuse pool hands on.
"""

from __future__ import annotations

import gc
import hashlib
import sys
import types
from dataclasses import dataclass
from typing import Any

from harness.ledger.writer import LedgerWriter
from harness.platform import allocator
from harness.tracking.context import current
from harness.tracking.reuse import REPLAY, TAKE
from harness.tracking.starts import Run


@dataclass
class Kept:
    model: Any
    run: Run
    digest: str
    modes: list[bool]  # each submodule's training flag at load


class Shelf:
    """The HF models of this process that may be handed on, one per configuration (a ``reuse.Keeper``)."""

    def __init__(self, writer: LedgerWriter):
        self.writer = writer
        self.kept: dict[str, Kept] = {}

    def park(self, key: str, model: Any, run: Run) -> None:
        """Keep ``model``, just loaded by ``run``."""
        self.kept[key] = Kept(model, run, digest(model), [m.training for m in model.modules()])

    def take(self, key: str) -> Any | None:
        """The kept model of configuration ``key``, handed on and recorded; None: load it."""
        kept = self.kept.get(key)
        pool = current().pool  # the running test's mode: a fresh retry or a fresh_engine test takes none
        if kept is None or (pool is not None and pool.mode not in (TAKE, REPLAY)):
            return None
        if _in_use(kept):  # the load goes on beside it; the shelf keeps the newer one
            return None
        reason = _changed(kept)
        if reason is not None:
            self._refused(key, reason)
            return None
        owner = current().owner.current()
        holder = current().holders.release(kept.run.id)
        if holder is not None:  # blocked starts name the test that holds it now
            holder.owner = owner
            current().holders.hold(holder)
        current().reused += 1
        current().reused_s += kept.run.startup_s or 0.0
        self.writer.write(
            "runner-reused",
            runner=kept.run.id,
            kind="hf",
            model=kept.run.model,
            fingerprint=key,
            **owner.fields(),
            saved_s=kept.run.startup_s,
        )
        return kept.model

    def _refused(self, key: str, reason: str) -> None:
        kept = self.kept.pop(key)
        self.writer.write(
            "reuse-refused",
            runner=kept.run.id,
            fingerprint=key,
            model=kept.run.model,
            test=current().owner.current().test,
            reason=reason,
        )
        del kept
        gc.collect()
        allocator.empty_cache()

    def make_room(self, fraction: float | None) -> None:
        """Before a vLLM start that declares ``fraction`` of each device: drop kept models when the free
        memory falls short of it (on the CPU, vLLM's KV cache is sized apart from what models keep)."""
        context = current()
        if not self.kept or fraction is None or context.platform.name == "cpu":
            return
        if any(r.free_bytes < fraction * r.total_bytes for r in context.platform.memory().values()):
            self.close()

    def close(self) -> None:
        """Drop every kept model (a vLLM start needs the room, or the session ends)."""
        if self.kept:
            self.kept.clear()
            gc.collect()
            allocator.empty_cache()


_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)


def _in_use(kept: Kept) -> bool:
    """Whether anything but the shelf and the model's own object graph (a module's bound methods, a
    cache keyed by it) references the model: then the test that loaded it may still use it."""
    # the Kept's field and getrefcount's argument
    if sys.getrefcount(kept.model) == 2:
        return False
    gc.collect()  # a dropped runner object in a cycle with the model refers to it until collected
    model = kept.model
    graph = {id(model)}
    stack = [model]
    while stack:
        for referent in gc.get_referents(stack.pop()):
            # classes, modules and functions lead to globals, and from there to everything
            if id(referent) not in graph and gc.is_tracked(referent) and not isinstance(referent, _SHARED):
                graph.add(id(referent))
                stack.append(referent)
    inside = sum(1 for referrer in gc.get_referrers(model) if id(referrer) in graph)
    # the Kept's field, this frame's ``model`` and getrefcount's argument
    return sys.getrefcount(model) - 3 - inside > 0


def _changed(kept: Kept) -> str | None:
    """Why the kept model may not be handed on (a test changed it), or None. The training mode is put
    back as it was at load first: ``SentenceTransformer.encode`` itself switches the model to eval."""
    modules = list(kept.model.modules())
    if len(modules) != len(kept.modes):
        return "a test changed it (submodules were added or removed)"
    for module, mode in zip(modules, kept.modes, strict=True):
        module.training = mode
    try:
        now = digest(kept.model)
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
