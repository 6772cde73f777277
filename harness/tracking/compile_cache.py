"""Whether a vLLM engine started with its compiled graphs at hand (warm) or compiled them (cold).

Judged from the two caches an engine start reads, not from the engine process's log (which the harness
does not see): vLLM's (``$VLLM_CACHE_ROOT/torch_compile_cache``, one folder per compiled configuration,
e.g. ``torch_aot_compile/<hash>``) and torch inductor's (``$TORCHINDUCTOR_CACHE_DIR``, by default
``<tmp>/torchinductor_<user>``). A start that left a configuration folder that was not there before
compiled (cold); one that found its folder there and added none was warm (vLLM 0.32 keeps inductor's
artifacts inside that folder, ``torch_aot_compile/<hash>/inductor_cache``, and may recompile after a failed
load of its own entry, yet with inductor's cache at hand); with no vLLM folder at all, inductor's own cache
filling during the start says cold. An engine that compiles nothing (``enforce_eager``, which the harness's
``VllmRunner`` defaults to) or caches that say nothing either way is neither (None). A start beside
another engine's in the same cache may read the other's new folder as its own: cold, the safe side.
"""

from __future__ import annotations

import getpass
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

VLLM_CACHE_ROOT = "VLLM_CACHE_ROOT"
INDUCTOR_CACHE_DIR = "TORCHINDUCTOR_CACHE_DIR"
DEPTH = 2  # torch_compile_cache/<hash> (older vLLM) and torch_compile_cache/torch_aot_compile/<hash>


def vllm_root(env: Mapping[str, str]) -> Path:
    """vLLM's cache root as vLLM's ``envs.VLLM_CACHE_ROOT`` defaults it."""
    if env.get(VLLM_CACHE_ROOT):
        return Path(env[VLLM_CACHE_ROOT]).expanduser()
    return Path(env.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "vllm"


def inductor_dir(env: Mapping[str, str]) -> Path:
    """torch inductor's cache folder as torch defaults it (``cache_dir()``)."""
    if env.get(INDUCTOR_CACHE_DIR):
        return Path(env[INDUCTOR_CACHE_DIR]).expanduser()
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return Path(tempfile.gettempdir()) / ("torchinductor_" + "".join(c if c.isalnum() else "_" for c in user))


@dataclass(frozen=True)
class Snapshot:
    """The compiled configurations vLLM's cache holds, and whether inductor's holds anything."""

    entries: frozenset[str]
    inductor: bool

    @classmethod
    def take(cls, env: Mapping[str, str] | None = None) -> Snapshot:
        env = os.environ if env is None else env
        return cls(_entries(vllm_root(env) / "torch_compile_cache"), _any(inductor_dir(env)))


def _entries(root: Path) -> frozenset[str]:
    """Folders up to ``DEPTH`` below ``root``, as relative paths; none where it cannot be read."""
    found: set[str] = set()
    level = [root]
    for _ in range(DEPTH):
        below = []
        for folder in level:
            try:
                children = [child for child in folder.iterdir() if child.is_dir() and not child.is_symlink()]
            except OSError:
                continue
            found.update(str(child.relative_to(root)) for child in children)
            below += children
        level = below
    return frozenset(found)


def _any(folder: Path) -> bool:
    try:
        return any(True for _ in folder.iterdir())
    except OSError:
        return False


def judge(before: Snapshot, after: Snapshot, compiles: bool = True) -> str | None:
    """``"cold"``, ``"warm"`` or None for one start (see the module)."""
    if not compiles:
        return None
    if after.entries - before.entries:
        return "cold"
    if before.entries:
        return "warm"
    return "cold" if after.inductor and not before.inductor else None


def compiles(config: Mapping[str, object]) -> bool:
    """Whether an engine of this configuration compiles: not ``enforce_eager``, not compilation level 0."""
    if config.get("enforce_eager"):
        return False
    compilation = config.get("compilation_config")
    level = (
        compilation.get("level", compilation.get("mode")) if isinstance(compilation, Mapping) else compilation
    )
    return level not in (0, "0")
