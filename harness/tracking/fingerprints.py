"""A start's configuration as data: the call's arguments by name (``normalise``), values by value where they
are data (``as_data``, ``json_safe``), a local model folder's files (``local_files``), and the fingerprint
the ledger and the reuse pool key a start by."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import inspect
import json
import os
import re
from typing import Any


def json_safe(value: Any) -> Any:
    """Config values as JSON, data by value: a dataclass (vLLM's ``*Config``) or pydantic model as its class
    and fields, an enum as its member, a set sorted, a path as text; any other object as its text without
    memory addresses (stable fingerprints; ``vllm.key.reuse_key`` adds such objects' identity)."""
    try:
        return json.loads(json.dumps(value, default=as_data))
    except (ValueError, RecursionError):  # a cycle: its text alone
        return json.loads(json.dumps(value, default=_text))


def as_data(value: Any) -> Any:
    """``value`` as JSON-able data where it is data (see ``json_safe``); else its text."""
    kind = type(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
        return {"__class__": kind.__qualname__, **fields}
    if callable(getattr(value, "model_dump", None)) and hasattr(kind, "model_fields"):  # pydantic
        return {"__class__": kind.__qualname__, **value.model_dump()}
    if isinstance(value, enum.Enum):
        return f"{kind.__qualname__}.{value.name}"
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return _text(value)


def is_data(value: Any) -> bool:
    """Whether ``as_data`` takes ``value`` by value (else it is an object, compared by identity)."""
    return (
        (dataclasses.is_dataclass(value) and not isinstance(value, type))
        or (callable(getattr(value, "model_dump", None)) and hasattr(type(value), "model_fields"))
        or isinstance(value, enum.Enum | set | frozenset | os.PathLike)
    )


def _text(value: Any) -> str:
    return re.sub(r" at 0x[0-9a-f]+", "", str(value))


def normalise(function, args: tuple, kwargs: dict) -> dict:
    """The call's arguments by parameter name, **kwargs flattened, values equal to defaults dropped.

    ``self``/``cls`` are left out: the instance is not built yet when a constructor is wrapped.
    """
    signature = inspect.signature(function)
    bound = signature.bind(*args, **kwargs)
    config = {}
    for name, value in bound.arguments.items():
        parameter = signature.parameters[name]
        if name in ("self", "cls"):
            continue
        if parameter.kind is parameter.VAR_KEYWORD:
            config.update(value)
        elif parameter.kind is parameter.VAR_POSITIONAL:
            if value:
                config[name] = list(value)
        elif value is not parameter.default and not (
            parameter.default is not parameter.empty and _equal(value, parameter.default)
        ):
            config[name] = value
    return json_safe(config)


def _equal(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # tensors and arrays compare element-wise
        return False


SMALL_FILE = 1 << 20  # a local model's files up to this size are keyed by their content


MOST_FILES = 10_000  # a folder with more is keyed by those it lists first


def local_files(path: object) -> str | None:
    """A local model or checkpoint's absolute place and a digest of its files (each file's path below it,
    size and change time, and the content of small ones: ``config.json``, ``generation_config.json``, the
    tokenizer's), so rewritten files are another model; None when ``path`` is not a local path."""
    if not isinstance(path, str | os.PathLike) or not os.path.exists(path):
        return None
    where = os.path.abspath(path)
    digest = hashlib.sha256()
    try:
        if os.path.isdir(where):
            listed = sorted(
                os.path.join(folder, name) for folder, _, names in os.walk(where) for name in names
            )[:MOST_FILES]
        else:
            listed = [where]
        for file in listed:
            status = os.stat(file)
            digest.update(f"{os.path.relpath(file, where)} {status.st_size} {status.st_mtime_ns}\n".encode())
            if status.st_size <= SMALL_FILE:
                with open(file, "rb") as handle:
                    digest.update(hashlib.sha256(handle.read()).digest())
    except OSError as error:  # unreadable: its place and what stopped the walk
        digest.update(type(error).__name__.encode())
    return f"{where} {digest.hexdigest()[:12]}"


def fingerprint(kind: str, config: dict) -> str:
    return hashlib.sha256(json.dumps([kind, config], sort_keys=True).encode()).hexdigest()[:12]
