"""Suites and their ordered phases: ``[tool.harness.suites.<name>]`` → ``Suite``.

A suite table gives ``paths`` and, optionally, ``phases`` (an array of tables). Without ``phases`` the
default shape applies: ``shared-engine`` (tests sharing class/module-scoped engines, one worker per GPU,
``loadscope`` keeps a scope on one worker) → ``standalone`` (tests that build their own runners,
``loadfile``) → ``multi-gpu`` (``gpus(n)`` tests, serially, with every device visible).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Literal

from harness.config.validate import (
    Bounds,
    Positive,
    Text,
    Workers,
    check,
    expected,
    fields_of,
    hints,
    known,
    table,
)
from harness.errors import ConfigError, HarnessError

Paths = Annotated[tuple[Text, ...], Bounds(1)]
# a suite or phase name is a directory or file name in the run directory: no '.', '..', '/', NUL or '+'
PHASE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


@dataclass(frozen=True)
class Phase:
    name: Text
    paths: Paths
    markers: Text | None = None
    keywords: Text | None = None
    workers: Literal["per-gpu", "serial"] | Workers = "per-gpu"
    dist: Literal["loadscope", "loadfile"] = "loadscope"
    timeout_s: Positive | None = None

    def selection(
        self, paths: tuple[str, ...] | None = None, workers: int | None = None, extra: Sequence[str] = ()
    ) -> list[str]:
        """pytest arguments choosing this phase's tests and workers (``paths`` replaces the phase's own).

        ``workers`` is the count ``per-gpu`` resolved to (unknown: ``-n auto``); a phase of one worker runs
        without xdist, so no controller process imports the suite's conftest beside the worker. ``extra``
        (the user's) goes before ``-m`` / ``-k``: pytest keeps the last, and the phase's own (narrowed by
        the run's) must be it.
        """
        args = list(self.paths if paths is None else paths)
        count = {"serial": 1, "per-gpu": workers}.get(self.workers, self.workers)  # type: ignore[arg-type]
        if count == 1:
            args += ["-n", "0"]
        else:  # per-gpu keeps "auto": the plugin's pytest_xdist_auto_num_workers decides it in pytest itself
            args += ["-n", "auto" if self.workers == "per-gpu" else str(count), "--dist", self.dist]
        args += extra
        if self.markers:
            args += ["-m", self.markers]
        if self.keywords:
            args += ["-k", self.keywords]
        return args

    def narrowed(self, markers: str | None, keywords: str | None) -> Phase:
        """This phase with the run's own ``-m`` / ``-k`` ANDed in: selection narrows, never replaces."""
        return replace(self, markers=_both(self.markers, markers), keywords=_both(self.keywords, keywords))


def _both(own: str | None, extra: str | None) -> str | None:
    return f"({own}) and ({extra})" if own and extra else own or extra


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
    if not PHASE_NAME.fullmatch(name):
        expected(f"{where} name", "letters, digits, '_', '.', '-' (a letter or digit first, ≤ 100)", name)
    where = f"{where.rsplit(' ', 1)[0]} phase {name!r}"
    values = fields_of(where, {k: v for k, v in given.items() if k != "name"}, PHASE_KINDS)
    if "paths" not in values and suite_paths is None:
        raise ConfigError(f"{where} paths: missing (give it here or in the suite table)")
    _plain_paths(where, values.get("paths", ()))
    for key in ("markers", "keywords"):  # their grammar is pytest's, checked in the run's collection
        if values.get(key) is not None and not values[key].strip():
            expected(f"{where} {key}", "a pytest expression (or no key: every test)", values[key])
    return Phase(**{"paths": suite_paths, **values, "name": name})


def _plain_paths(where: str, paths: tuple[str, ...]) -> None:
    """No path pytest would read as an option (``-x``) or an arguments file (``@x``), or that the OS cannot
    take (a NUL)."""
    odd = next((p for p in paths if p.startswith(("-", "@")) or "\0" in p), None)
    if odd is not None:
        expected(f"{where} paths", "paths not starting with '-' or '@' and without NUL (write ./-x)", odd)


def parse_suite(name: str, given: object) -> Suite:
    """One ``[tool.harness.suites.<name>]`` table → ``Suite``; a ``ConfigError`` names suite, phase, key."""
    where = f"[tool.harness.suites.{name}]"
    if not PHASE_NAME.fullmatch(name):  # it names the default run directory, harness-out/<suite>-<platform>
        expected(f"{where} name", "letters, digits, '_', '.', '-' (a letter or digit first, ≤ 100)", name)
    values = fields_of(where, table(where, given), SUITE_KINDS)
    paths = values.get("paths")
    _plain_paths(where, paths or ())
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


def check_paths(suite: Suite, root: Path) -> None:
    """Every phase path exists and lies inside the project at ``root``: pytest would otherwise collect
    nothing, or another tree. Paths are read from the current directory, as pytest reads them; ``..`` is
    resolved by name, so a symlink the project keeps inside it still counts as inside."""
    inside = os.path.normpath(root.absolute())
    for phase in suite.phases:
        where = f"[tool.harness.suites.{suite.name}] phase {phase.name!r} paths"
        for given in phase.paths:
            path = os.path.normpath(Path.cwd() / given.split("::", 1)[0])
            if os.path.commonpath([inside, path]) != inside:
                raise ConfigError(f"{where}: {given!r} is outside the project ({inside})")
            if not os.path.exists(path):
                raise ConfigError(f"{where}: {given!r} does not exist")


def run_dir(suite: str, platform: str, shard: str | None = None) -> str:
    """A run's default directory, ``harness-out/<suite>-<platform>[-<shard>]``: one per shard (``shard``:
    its name, ``harness.split.Shard.name``), so the parallel jobs of one CI step upload their reports under
    different paths for the merge step (a name may be a glob's: every shard's)."""
    name = f"harness-out/{suite}-{platform}"
    return f"{name}-{shard}" if shard else name
