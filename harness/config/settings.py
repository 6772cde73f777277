"""``[tool.harness]`` of the user's ``pyproject.toml`` → ``Settings``.

Precedence: built-in defaults (some per platform) < top-level keys < ``[tool.harness.<platform>]`` <
``HARNESS_<KEY>`` in the environment. Every table is validated, not only the current platform's, so a
typo fails on every CI agent alike. ``[tool.harness.suites]`` and ``[tool.harness.ci]`` belong to
``harness.config.suites`` and ``harness.ci`` and pass through untouched.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from pathlib import Path

from harness.config.pyproject import find_pyproject, read_table
from harness.errors import ConfigError
from harness.platform import PLATFORMS

OTHER_OWNERS = ("suites", "ci")
OVERLAP_POLICIES = ("block", "warn")


@dataclasses.dataclass(frozen=True)
class Settings:
    settle: bool = False
    settle_ratio: float = 0.05
    settle_floor_gib: float = 4.0
    settle_stable_s: float = 2.0
    settle_poll_s: float = 1.0
    settle_timeout_s: float = 240.0
    shutdown_timeout_s: float | None = None
    memory_wait_timeout_s: float = 240.0
    block_grace_s: float = 3.0
    overlap: str = "block"  # declared shares past a device: "block" the start, or "warn" and go on if it fits
    release_tolerance_gib: float = 0.5
    memory_sample_s: float = 5.0
    test_timeout_s: float = 900.0
    phase_timeout_s: float | None = None
    cpu_workers: int = 1
    workers_per_gpu: int = 1
    ledger_dir: str | None = None


PLATFORM_DEFAULTS = {
    "cuda": {},
    "rocm": {"settle": True, "shutdown_timeout_s": 60.0, "test_timeout_s": 1800.0},
    # host memory moves with every process on the machine and with a process's first import of model code
    # (allocator arenas, lazily loaded modules): 0.5 GiB read as leaks after clean HF and vLLM stops here
    "cpu": {"release_tolerance_gib": 2.0},
}

_FIELDS = {field.name: field.type for field in dataclasses.fields(Settings)}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_NULL = ("", "none", "null")


def _expected(kind: str) -> str:
    base = {"bool": "a boolean", "float": "a number", "int": "an integer", "str": "a string"}[
        kind.split(" ")[0]
    ]
    return base + (" or null" if kind.endswith("| None") else "")


def _check(where: str, key: str, value):
    """A TOML value of the key's type (ints accepted for floats), else a ConfigError naming the key."""
    if key not in _FIELDS:
        raise ConfigError(f"{where} {key}: unknown key (known: {', '.join(_FIELDS)})")
    return _typed(f"{where} {key}", key, value)


def _typed(label: str, key: str, value):
    kind = _FIELDS[key]
    base = kind.split(" ")[0]
    ok = {
        "bool": isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "str": isinstance(value, str),
    }[base]
    if not ok:
        raise ConfigError(f"{label}: expected {_expected(kind)}, got {value!r}")
    if base == "float" and not math.isfinite(value):  # nan compares false both ways: it would slip through
        raise ConfigError(f"{label}: expected a finite number, got {value!r}")
    if base in ("float", "int") and value < (1 if base == "int" else 0):
        raise ConfigError(f"{label}: expected {'≥ 1' if base == 'int' else '≥ 0'}, got {value!r}")
    if key == "settle_ratio" and value > 1:
        raise ConfigError(f"{label}: expected a ratio between 0 and 1, got {value!r}")
    if key == "overlap" and value not in OVERLAP_POLICIES:
        raise ConfigError(f"{label}: expected one of {', '.join(map(repr, OVERLAP_POLICIES))}, got {value!r}")
    return float(value) if base == "float" else value


def _from_env(key: str, text: str):
    """``HARNESS_<KEY>`` parsed to the key's type; ``none``/``null``/empty for keys that may be null."""
    kind = _FIELDS[key]
    base, variable = kind.split(" ")[0], f"HARNESS_{key.upper()}"
    if kind.endswith("| None") and text.strip().lower() in _NULL:
        return None
    try:
        if base == "bool":
            if text.strip().lower() not in _TRUE + _FALSE:
                raise ValueError
            value = text.strip().lower() in _TRUE
        else:
            value = {"float": float, "int": int, "str": str}[base](text)
    except ValueError:
        raise ConfigError(f"{variable}: expected {_expected(kind)}, got {text!r}") from None
    return _typed(variable, key, value)


def load_settings(
    platform_name: str, pyproject: Path | str | None = None, env: Mapping[str, str] = os.environ
) -> Settings:
    if platform_name not in PLATFORMS:
        raise ConfigError(f"platform {platform_name!r}: expected one of {', '.join(PLATFORMS)}")
    table = read_table(Path(pyproject) if pyproject is not None else find_pyproject())
    values: dict = dict(PLATFORM_DEFAULTS[platform_name])
    per_platform = {}
    for key, value in table.items():
        if key in OTHER_OWNERS:
            continue
        if key in PLATFORMS:
            if not isinstance(value, dict):
                raise ConfigError(
                    f"[tool.harness] {key}: expected a table [tool.harness.{key}], got {value!r}"
                )
            per_platform[key] = {k: _check(f"[tool.harness.{key}]", k, v) for k, v in value.items()}
        else:
            values[key] = _check("[tool.harness]", key, value)
    values.update(per_platform.get(platform_name, {}))
    for key in _FIELDS:
        if f"HARNESS_{key.upper()}" in env:
            values[key] = _from_env(key, env[f"HARNESS_{key.upper()}"])
    return Settings(**values)
