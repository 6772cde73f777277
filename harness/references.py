"""Reference results (what a model suite compares vLLM against) computed once, kept across workers and runs.

An HF reference costs a model load in every xdist worker and in every run, though it depends only on the
function that computes it, its arguments, the model's files, the library versions and the kind of device.
``reference(function, *args)`` keys its result by all of these: a worker that finds it computed reads it;
one that does not computes it (through ``in_child``, recorded as the calling test's) while holding the key's
lock, so the other workers of the run wait and read instead of loading the model again. A change of model
files, of the function's source, of torch, transformers or sentence-transformers, or of the device kind
computes it afresh. ``cache_references = false`` turns the cache off; it lives in
``$XDG_CACHE_HOME/harness/references`` (CI may keep that folder between builds). Results are pickled:
the cache is trusted like the project's own files.
"""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from harness.platform.packages import installed
from harness.tracking import context
from harness.tracking.child import in_child

T = TypeVar("T")
LIBRARIES = ("torch", "transformers", "sentence-transformers")


def cache_dir(env=os.environ) -> Path:
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "harness" / "references"


def _content(path: Path) -> str:
    """A file's bytes, or a folder's files (names and bytes, in name order), as one hex digest."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        digest.update(str(file.relative_to(path) if file != path else file.name).encode() + b"\0")
        with open(file, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _stands_for(value: Any) -> Any:
    """What an argument contributes to the key: a path that exists by what it holds (a model saved
    again into another temporary folder is the same model), anything else by its ``repr``."""
    if isinstance(value, str | os.PathLike) and os.path.exists(value):
        return ("content", _content(Path(value)))
    return repr(value)


def key(
    function: Callable, source: str, args: tuple, kwargs: dict, *, device_kind: str, versions: dict
) -> str:
    """The hex key of one reference: function (name and source), arguments (paths by the files they hold),
    library versions and the device kind."""
    described = {
        "function": [function.__module__, function.__qualname__, source],
        "args": [_stands_for(value) for value in args],
        "kwargs": {name: _stands_for(value) for name, value in sorted(kwargs.items())},
        "versions": versions,
        "device": device_kind,
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:32]


def device_kind() -> str:
    """The platform and the names of its visible devices: a reference on an H200 is not one on the CPU."""
    platform = context.current().platform
    return f"{platform.name}:" + ",".join(sorted({device.name for device in platform.devices()}))


def reference(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``in_child(function, *args, **kwargs)``, read from the cache when that result was computed before."""
    if not context.current().settings.cache_references:
        return in_child(function, *args, **kwargs)
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):  # no source to key by (a function built at run time): not kept
        return in_child(function, *args, **kwargs)
    versions = {label: found and found[0] for label, found in installed(LIBRARIES).items()}
    name = key(function, source, args, kwargs, device_kind=device_kind(), versions=versions)
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.pickle"
    with open(folder / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other workers wait here while one computes
        try:
            with open(path, "rb") as stream:
                return pickle.load(stream)
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError):
            pass  # not computed yet, or a torn or stale file: computed again below
        result = in_child(function, *args, **kwargs)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        with open(partial, "wb") as stream:
            pickle.dump(result, stream)
        os.replace(partial, path)
        return result
