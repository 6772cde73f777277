"""Suites and their ordered phases: ``[tool.harness.suites.<name>]`` → ``Suite``.

A suite table gives ``paths`` and, optionally, ``phases`` (an array of tables). Without ``phases`` the
default shape applies: ``shared-engine`` (tests sharing class/module-scoped engines, one worker per GPU,
``loadscope`` keeps a scope on one worker) → ``standalone`` (tests that build their own runners,
``loadfile``) → ``multi-gpu`` (``gpus(n)`` tests, serially, with every device visible).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from harness.config.validate import (
    Bounds,
    Count,
    Positive,
    Text,
    check,
    expected,
    fields_of,
    hints,
    known,
    table,
)
from harness.errors import ConfigError, HarnessError

Paths = Annotated[tuple[Text, ...], Bounds(1)]


@dataclass(frozen=True)
class Phase:
    name: Text
    paths: Paths
    markers: Text | None = None
    keywords: Text | None = None
    workers: Literal["per-gpu", "serial"] | Count = "per-gpu"
    dist: Literal["loadscope", "loadfile"] = "loadscope"
    timeout_s: Positive | None = None

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


PHASE_KINDS = hints(Phase)
SUITE_KINDS = {"paths": Paths, "phases": Annotated[list, Bounds(1)]}


def _phase(where: str, given: object, suite_paths: tuple[str, ...] | None) -> Phase:
    """One phase table; once its name is known, problems name the phase rather than its index."""
    given = table(where, given)
    known(where, given, PHASE_KINDS)
    name = check(f"{where} name", given.get("name"), PHASE_KINDS["name"])
    if "/" in name:
        expected(f"{where} name", "a name without '/'", name)
    where = f"{where.rsplit(' ', 1)[0]} phase {name!r}"
    values = fields_of(where, {k: v for k, v in given.items() if k != "name"}, PHASE_KINDS)
    if "paths" not in values and suite_paths is None:
        raise ConfigError(f"{where} paths: missing (give it here or in the suite table)")
    return Phase(**{"paths": suite_paths, **values, "name": name})


def parse_suite(name: str, given: object) -> Suite:
    """One ``[tool.harness.suites.<name>]`` table → ``Suite``; a ``ConfigError`` names suite, phase, key."""
    where = f"[tool.harness.suites.{name}]"
    values = fields_of(where, table(where, given), SUITE_KINDS)
    paths = values.get("paths")
    if "phases" not in values:
        if paths is None:
            raise ConfigError(f"{where} paths: missing (needed for the default phases)")
        return Suite(name, default_phases(paths))
    parsed = tuple(_phase(f"{where} phases[{i}]", phase, paths) for i, phase in enumerate(values["phases"]))
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
