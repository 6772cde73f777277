"""Suites and their ordered phases: ``[tool.harness.suites.<name>]`` → ``Suite``.

A suite table gives ``paths`` and, optionally, ``phases`` (an array of tables). Without ``phases`` the
default shape applies: ``shared-engine`` (tests sharing class/module-scoped engines, one worker per GPU,
``loadscope`` keeps a scope on one worker) → ``standalone`` (tests that build their own runners,
``loadfile``) → ``multi-gpu`` (``gpus(n)`` tests, serially, with every device visible).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.errors import ConfigError, HarnessError

WORKERS = ("per-gpu", "serial")
DISTS = ("loadscope", "loadfile")


@dataclass(frozen=True)
class Phase:
    name: str
    paths: tuple[str, ...]
    markers: str | None = None
    keywords: str | None = None
    workers: str | int = "per-gpu"
    dist: str = "loadscope"
    timeout_s: float | None = None

    def selection(self, paths: tuple[str, ...] | None = None) -> list[str]:
        """pytest arguments choosing this phase's tests and workers (``paths`` replaces the phase's own)."""
        args = list(self.paths if paths is None else paths)
        if self.markers:
            args += ["-m", self.markers]
        if self.keywords:
            args += ["-k", self.keywords]
        if self.workers == "serial":
            return args + ["-n", "0"]
        count = "auto" if self.workers == "per-gpu" else str(self.workers)
        return args + ["-n", count, "--dist", self.dist]


@dataclass(frozen=True)
class Suite:
    name: str
    phases: tuple[Phase, ...] = field(default_factory=tuple)


def default_phases(paths: tuple[str, ...]) -> tuple[Phase, ...]:
    return (
        Phase("shared-engine", paths, markers="not standalone and not gpus", dist="loadscope"),
        Phase("standalone", paths, markers="standalone and not gpus", dist="loadfile"),
        Phase("multi-gpu", paths, markers="gpus", workers="serial"),
    )


_SUITE_KEYS = {"paths", "phases"}
_PHASE_KEYS = {"name", "paths", "markers", "keywords", "workers", "dist", "timeout_s"}


def _paths(where: str, value) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(p, str) and p for p in value):
        raise ConfigError(f"{where} paths: expected a non-empty list of strings, got {value!r}")
    return tuple(value)


def _phase(where: str, table, suite_paths: tuple[str, ...] | None) -> Phase:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table, got {table!r}")
    unknown = sorted(set(table) - _PHASE_KEYS)
    if unknown:
        raise ConfigError(f"{where} {unknown[0]}: unknown key (known: {', '.join(sorted(_PHASE_KEYS))})")
    name = table.get("name")
    if not isinstance(name, str) or not name or "/" in name:
        raise ConfigError(f"{where} name: expected a non-empty string without '/', got {name!r}")
    where = f"{where.rsplit(' ', 1)[0]} phase {name!r}"
    if "paths" in table:
        paths = _paths(where, table["paths"])
    elif suite_paths is None:
        raise ConfigError(f"{where} paths: missing (give it here or in the suite table)")
    else:
        paths = suite_paths
    for key in ("markers", "keywords"):
        if key in table and not (isinstance(table[key], str) and table[key].strip()):
            raise ConfigError(f"{where} {key}: expected a non-empty string, got {table[key]!r}")
    workers = table.get("workers", "per-gpu")
    if not (workers in WORKERS or (type(workers) is int and workers >= 1)):
        raise ConfigError(f"{where} workers: expected 'per-gpu', 'serial' or an integer ≥ 1, got {workers!r}")
    dist = table.get("dist", "loadscope")
    if dist not in DISTS:
        raise ConfigError(f"{where} dist: expected one of {', '.join(DISTS)}, got {dist!r}")
    timeout = table.get("timeout_s")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise ConfigError(f"{where} timeout_s: expected a number > 0, got {timeout!r}")
    return Phase(
        name,
        paths,
        table.get("markers"),
        table.get("keywords"),
        workers,
        dist,
        None if timeout is None else float(timeout),
    )


def parse_suite(name: str, table) -> Suite:
    """One ``[tool.harness.suites.<name>]`` table → ``Suite``; a ``ConfigError`` names suite, phase, key."""
    where = f"[tool.harness.suites.{name}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table, got {table!r}")
    unknown = sorted(set(table) - _SUITE_KEYS)
    if unknown:
        raise ConfigError(f"{where} {unknown[0]}: unknown key (known: {', '.join(sorted(_SUITE_KEYS))})")
    paths = _paths(where, table["paths"]) if "paths" in table else None
    if "phases" not in table:
        if paths is None:
            raise ConfigError(f"{where} paths: missing (needed for the default phases)")
        return Suite(name, default_phases(paths))
    phases = table["phases"]
    if not isinstance(phases, list) or not phases:
        raise ConfigError(f"{where} phases: expected a non-empty array of tables, got {phases!r}")
    parsed = tuple(_phase(f"{where} phases[{i}]", phase, paths) for i, phase in enumerate(phases))
    names = [phase.name for phase in parsed]
    repeated = next((n for n in names if names.count(n) > 1), None)
    if repeated:
        raise ConfigError(f"{where} phase {repeated!r}: the name is used twice")
    return Suite(name, parsed)


def load_suite(harness_table: dict, name: str, only: list[str] | None = None) -> Suite:
    """The named suite from ``[tool.harness]``, restricted to ``only`` phases (kept in suite order)."""
    suites = harness_table.get("suites", {})
    if not isinstance(suites, dict):
        raise ConfigError("[tool.harness] suites: expected tables [tool.harness.suites.<name>]")
    if name not in suites:
        known = ", ".join(sorted(suites)) or "none declared"
        raise HarnessError(f"unknown suite {name!r} (known: {known})")
    suite = parse_suite(name, suites[name])
    if not only:
        return suite
    names = [phase.name for phase in suite.phases]
    unknown = [n for n in only if n not in names]
    if unknown:
        raise HarnessError(f"suite {name!r} has no phase {unknown[0]!r} (phases: {', '.join(names)})")
    return Suite(name, tuple(p for p in suite.phases if p.name in only))
