"""``[tool.harness]`` of the user's ``pyproject.toml`` → ``Settings``.

Precedence: built-in defaults (some per platform: ``harness.platform.facts``) < top-level keys <
``[tool.harness.<platform>]`` < ``HARNESS_<KEY>`` in the environment. Every table is validated, not only
the current platform's, so a typo fails on every CI agent alike. ``[tool.harness.suites]`` and
``[tool.harness.ci]`` belong to ``harness.config.suites`` and ``harness.ci`` and pass through untouched.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal, NamedTuple

from harness import failures, quarantine
from harness.config.pyproject import find_pyproject, read_table
from harness.config.validate import (
    Amount,
    Bounds,
    Positive,
    Text,
    Workers,
    fields_of,
    from_text,
    hints,
    table,
)
from harness.errors import ConfigError
from harness.platform import FACTS, PLATFORMS

OTHER_OWNERS = ("suites", "ci", "select")
CI_DEADLINE = "HARNESS_CI_DEADLINE"  # Unix time at which CI ends the job (the generated CI exports it)


class Settings(NamedTuple):
    settle: bool = False
    settle_ratio: Annotated[float, Bounds(0, 1)] = 0.05
    settle_floor_gib: Amount = 4.0
    settle_stable_s: Amount = 2.0
    settle_poll_s: Amount = 1.0
    settle_timeout_s: Amount = 240.0
    shutdown_timeout_s: Amount | None = None
    memory_wait_timeout_s: Amount = 240.0
    block_grace_s: Amount = 3.0
    overlap: Literal["block", "warn"] = "block"  # declared shares past a device: block, or warn if it fits
    release_tolerance_gib: Amount = 0.5
    memory_sample_s: Annotated[float, Bounds(0.1, 3600, off=True)] = 5.0  # 0: no sampler thread
    test_timeout_s: Amount = 900.0
    # a hung phase ends with a report; CI sets HARNESS_PHASE_TIMEOUT_S below its step's own timeout
    phase_timeout_s: Positive | None = 3 * 3600.0
    cpu_workers: Workers = 1
    workers_per_gpu: Workers = 1
    ledger_dir: str | None = None
    baseline: str | None = None  # the base branch's report: harness run's summary opens with before -> after
    reuse: bool = False
    reuse_engines: Annotated[int, Bounds(1, 64)] = 2  # warm engines a process keeps, while their shares fit
    reuse_check_s: Amount = 30.0  # a hand-off's reset that takes longer is refused, the engine shut down
    reuse_hf: bool = False  # hand a loaded HF model on to the next identical load (harness.tracking.hf)
    freeze_collected: bool = True  # gc.freeze once collected (harness.pytest_plugin.frozen)
    cache_references: bool = True  # references kept across workers and runs (harness.references)
    # why a test failed (harness.failures): a suite's own message patterns per class, checked before the
    # harness's; the classes a failed test is retried for (none by default), how often and how far apart
    failure_patterns: dict[str, tuple[Text, ...]] = {}  # a default never mutated
    retry: tuple[Text, ...] = ()
    retries: Annotated[int, Bounds(1, 10)] = 1
    retry_delay_s: Annotated[float, Bounds(0, 3600)] = 0.0
    # tests whose failures are reported but do not fail the run (harness.quarantine): node ids or tables
    # {test, until, platform, reason}; and vLLM's quarantined_tests.json
    quarantine: tuple[str | dict[str, str], ...] = ()
    quarantine_file: str | None = None


KINDS = hints(Settings)


def load_settings(
    platform_name: str, pyproject: Path | str | None = None, env: Mapping[str, str] = os.environ
) -> Settings:
    if platform_name not in PLATFORMS:
        raise ConfigError(f"platform {platform_name!r}: expected one of {', '.join(PLATFORMS)}")
    tool = read_table(Path(pyproject) if pyproject is not None else find_pyproject())
    top = {key: value for key, value in tool.items() if key not in (*PLATFORMS, *OTHER_OWNERS)}
    values = {**FACTS[platform_name].settings, **fields_of("[tool.harness]", top, KINDS)}
    for name in (name for name in PLATFORMS if name in tool):
        given = fields_of(f"[tool.harness.{name}]", table(f"[tool.harness] {name}", tool[name]), KINDS)
        if name == platform_name:
            values.update(given)
    for key, kind in KINDS.items():
        variable = f"HARNESS_{key.upper()}"
        if variable in env:
            values[key] = from_text(variable, env[variable], kind)
    return _checked(Settings(**values))


def _checked(settings: Settings) -> Settings:
    """What a type cannot say: the failure classes and patterns, the quarantine's entries."""
    failures.patterns(settings.failure_patterns)
    unknown = [name for name in settings.retry if name not in failures.CLASSES]
    if unknown:
        known = ", ".join(failures.CLASSES)
        raise ConfigError(f"[tool.harness] retry: {unknown[0]!r} is not a failure class (known: {known})")
    quarantine.from_settings(settings.quarantine)
    return settings


def ci_deadline(env: Mapping[str, str] = os.environ) -> float | None:
    """``HARNESS_CI_DEADLINE`` (Unix time in seconds) as a number, or None where it is not set."""
    return from_text(CI_DEADLINE, env[CI_DEADLINE], float | None) if CI_DEADLINE in env else None
