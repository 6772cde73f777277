"""What an engine's reuse key holds: its arguments by value (and the identity of those that are not data),
every variable of the process that may change an engine, a local model's files, torch's matmul precision;
and why a start of the same arguments by value may not have a parked engine (``differs``)."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import os
import sys
from typing import Any

from harness.platform import masks
from harness.tracking.context import current
from harness.tracking.vllm.llms import Started
from harness.tracking.vllm.tables import (
    NOT_ENGINE,
    NOT_ENGINE_PREFIXES,
    PLAIN_SCALARS,
    PREFIXES,
    VLLM_DEFAULT_UTILIZATION,
)


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


_set_by_vllm: dict[str, str] = {}  # variables vLLM set itself while building an engine, and to what


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
    from harness.tracking.fingerprints import fingerprint, normalise

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
    """A local model's absolute place and the identity of its files (``fingerprints.local_files``): the same
    relative path elsewhere, or files changed in place, are another model. None for a hub name."""
    from harness.tracking.fingerprints import local_files

    return local_files(path)


def reuse_key(config: dict, args: tuple, kwargs: dict) -> str:
    """The reuse pool's key of a start: its fingerprint (data by value: vLLM's ``*Config`` objects built
    afresh in each call match), and the identity of each object in the arguments that is not data (a
    callable, an opaque object): two that print alike are the same only if they are one object."""
    from harness.tracking.fingerprints import fingerprint

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
    from harness.tracking.fingerprints import is_data

    found: list[Any] = []
    for value in values:
        if isinstance(value, PLAIN_SCALARS):
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
