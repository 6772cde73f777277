"""The one platform × suite definition both CI generators print, from ``[tool.harness.ci]``.

Buildkite and GitHub Actions get their cells from here so the two can never disagree on which nox sessions
exist, and every name that ends up in YAML or a shell command is checked once, here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.config.pyproject import find_pyproject, read_table
from harness.config.suites import parse_suite
from harness.errors import ConfigError, HarnessError
from harness.platform import PLATFORMS

QUEUES = {"cuda": "gpu-cuda", "rocm": "gpu-rocm", "cpu": "cpu"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")  # also a valid Buildkite step key, artifact and nox name


@dataclass(frozen=True)
class CiSettings:
    """``[tool.harness.ci]``: what the generated pipelines run where."""

    platforms: tuple[str, ...] = PLATFORMS
    suites: tuple[str, ...] = ()  # empty: every suite in [tool.harness.suites]
    queues: dict[str, str] = field(default_factory=lambda: dict(QUEUES))
    prebuilt_image: bool = False  # the agent image already has the test dependencies: nox --no-venv
    parallelism: int = 1
    timeout_in_minutes: int = 180
    retry_limit: int = 2


@dataclass(frozen=True)
class Cell:
    """One platform × suite: one nox session, one CI job (or Buildkite parallel group)."""

    platform: str
    suite: str

    @property
    def session(self) -> str:
        return f"{self.platform}_{self.suite}"

    @property
    def key(self) -> str:
        return f"{self.platform}-{self.suite}"

    @property
    def run_dir(self) -> str:
        return f"harness-out/{self.suite}-{self.platform}"


def check_name(kind: str, value: str) -> str:
    """A name that reaches YAML keys and shell commands: letters, digits, ``_`` and ``-`` only."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise HarnessError(
            f"{kind} name {value!r} is not allowed: use letters, digits, '_' and '-' (starting with a letter "
            "or digit)"
        )
    return value


def load(pyproject: Path | None = None) -> tuple[CiSettings, tuple[str, ...]]:
    """``[tool.harness.ci]`` and the suite names of ``[tool.harness.suites]`` from the nearest pyproject."""
    tool = read_table(pyproject or find_pyproject())
    suites = tool.get("suites", {})
    if not isinstance(suites, dict):
        raise ConfigError("[tool.harness] suites: expected tables [tool.harness.suites.<name>]")
    for name, table in suites.items():
        check_name("[tool.harness.suites] suite", name)
        for phase in parse_suite(name, table).phases:  # a broken suite fails here, not on every agent
            check_name(f"[tool.harness.suites.{name}] phase", phase.name)
    table = tool.get("ci", {})
    if not isinstance(table, dict):
        raise ConfigError(f"[tool.harness] ci: expected a table [tool.harness.ci], got {table!r}")
    return _settings(table), tuple(suites)


def cells(
    settings: CiSettings, known_suites: tuple[str, ...], platforms: str | None, suites: str | None
) -> list[Cell]:
    """The cells for ``--platforms`` / ``--suites`` (comma-separated), defaulting to the settings."""
    chosen_platforms = _split(platforms, "--platforms") or settings.platforms
    for platform in chosen_platforms:
        if platform not in PLATFORMS:
            check_name("platform", platform)
            raise HarnessError(f"platform {platform!r} is not one of {', '.join(PLATFORMS)}")
    chosen_suites = _split(suites, "--suites") or settings.suites or known_suites
    if not chosen_suites:
        raise HarnessError("no suites: define [tool.harness.suites.<name>] in pyproject or pass --suites")
    for suite in chosen_suites:
        check_name("suite", suite)
        if known_suites and suite not in known_suites:
            raise HarnessError(f"suite {suite!r} is not in [tool.harness.suites] ({', '.join(known_suites)})")
    return [Cell(platform, suite) for platform in chosen_platforms for suite in chosen_suites]


def _split(value: str | None, option: str) -> tuple[str, ...]:
    if value is None:
        return ()
    names = tuple(part.strip() for part in value.split(","))
    if not all(names):
        raise HarnessError(f"{option} {value!r} has an empty name")
    return names


def _settings(table: dict) -> CiSettings:
    types = {
        "platforms": (list, "a list"),
        "suites": (list, "a list"),
        "queues": (dict, "a table"),
        "prebuilt_image": (bool, "true or false"),
        "parallelism": (int, "an integer"),
        "timeout_in_minutes": (int, "an integer"),
        "retry_limit": (int, "an integer"),
    }
    values = {}
    for key, value in table.items():
        if key not in types:
            raise ConfigError(f"[tool.harness.ci] has unknown key {key!r} (known: {', '.join(types)})")
        expected, wording = types[key]
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise ConfigError(f"[tool.harness.ci] {key} must be {wording}, got {value!r}")
        values[key] = value
    for key in ("parallelism", "timeout_in_minutes"):
        if values.get(key, 1) < 1:
            raise ConfigError(f"[tool.harness.ci] {key} must be at least 1, got {values[key]}")
    if not 0 <= values.get("retry_limit", 0) <= 10:
        limit = values["retry_limit"]
        raise ConfigError(f"[tool.harness.ci] retry_limit must be 0..10 (Buildkite's range), got {limit}")
    queues = dict(QUEUES)
    for platform, queue in values.pop("queues", {}).items():
        if platform not in PLATFORMS:
            raise ConfigError(f"[tool.harness.ci.queues] has unknown platform {platform!r}")
        queues[platform] = check_name(f"[tool.harness.ci.queues] {platform} queue", queue)
    for key in ("platforms", "suites"):
        if key in values:
            values[key] = tuple(check_name(f"[tool.harness.ci] {key[:-1]}", name) for name in values[key])
    for platform in values.get("platforms", ()):
        if platform not in PLATFORMS:
            known = ", ".join(PLATFORMS)
            raise ConfigError(f"[tool.harness.ci] platforms has {platform!r}, not one of {known}")
    return CiSettings(queues=queues, **values)
