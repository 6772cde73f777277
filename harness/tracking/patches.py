"""Foreign runners: ``vllm.LLM``, ``PreTrainedModel.from_pretrained`` and ``SentenceTransformer`` are
wrapped when the suite first imports them (a meta-path hook), so suites with their own conftest are counted
without the harness paying for those imports. The wrappers are the adapters' (``tracking.vllm.wrap``,
``tracking.hf.wrap``: their ``TARGETS``); each takes the one recording path, ``starts.starting``.

Tracking never breaks the suite: a target that cannot be wrapped (the library moved or changed it) is
a ``not-tracked`` finding, never an exception from the user's import, and ``harness doctor`` says so
before a run.
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from harness.tracking.hf import wrap as hf_wrap
from harness.tracking.vllm import wrap as vllm_wrap


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
        *(Target(*target) for target in vllm_wrap.TARGETS),
        *(Target(*target) for target in hf_wrap.TARGETS),
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
    from harness.tracking.starts import not_tracked  # a library that changed: the recording path with it

    not_tracked(target.label, why)


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
