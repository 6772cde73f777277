"""``[tool.harness.select]``: which changed files mean every test (``global``, added to the defaults),
which mean the tests of a marker (a pattern mapped to markers: ``"csrc/**" = ["gpu"]``), which mean none
(``ignore``, or a pattern mapped to ``[]``; byte code, caches and harness-out/ always), and the packages
whose files footprints record (``packages``).

Patterns are globs on ``/``-separated paths relative to the repository's top (``**`` any folders, ``*``
within one name); a pattern without ``/`` matches the name in any folder (``conftest.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from harness.errors import HarnessError
from harness.select.profiler import PACKAGES

GLOBAL = (
    "conftest.py",
    "pyproject.toml",
    "noxfile.py",
    "setup.py",
    "setup.cfg",
    "tox.ini",
    "pytest.ini",
    ".github/**",
    ".buildkite/**",
    ".ci/**",
    ".gitlab-ci.yml",
)
# never code: byte code, caches, harness run's own output (where a project does not git-ignore them)
IGNORED = ("__pycache__/", "*.pyc", ".pytest_cache/", "harness-out/", ".nox/")
KEYS = ("global", "ignore", "packages", "map")


@dataclass(frozen=True)
class Rules:
    """The project's rules (the defaults where it names none)."""

    global_: tuple[str, ...] = GLOBAL
    ignore: tuple[str, ...] = IGNORED
    markers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # pattern -> markers
    packages: tuple[str, ...] = PACKAGES

    def is_global(self, path: str) -> bool:
        return any(matches(pattern, path) for pattern in self.global_)

    def ignored(self, path: str) -> bool:
        return any(matches(pattern, path) for pattern in self.ignore)

    def marked(self, path: str) -> set[str]:
        return {m for pattern, names in self.markers.items() if matches(pattern, path) for m in names}


def load(table: Mapping[str, object] | None) -> Rules:
    """``[tool.harness.select]`` (the ``select`` table of ``[tool.harness]``) → ``Rules``; a value of the
    wrong kind is one ``HarnessError`` line. ``global`` adds to the defaults; a string key other than the
    known ones is a pattern mapped to a list of markers."""
    table = dict(table or {})
    where = "[tool.harness.select]"
    mapped = dict(_table(table.pop("map", {}), f"{where} map"))
    extra = _strings(table.pop("global", []), f"{where} global")
    ignore = _strings(table.pop("ignore", []), f"{where} ignore")
    packages = _strings(table.pop("packages", list(PACKAGES)), f"{where} packages")
    for key, value in table.items():  # "csrc/**" = ["gpu"]; "docs/**" = [] ignores
        mapped[key] = _strings(value, f"{where} {key!r}")
    ignore += tuple(pattern for pattern, names in mapped.items() if not names)
    mapped = {pattern: names for pattern, names in mapped.items() if names}
    for pattern in [*extra, *ignore, *mapped]:
        _compiled(pattern)
    return Rules(GLOBAL + extra, IGNORED + ignore, {k: tuple(v) for k, v in mapped.items()}, packages)


def _table(value: object, where: str) -> Mapping[str, tuple[str, ...]]:
    if not isinstance(value, dict):
        raise HarnessError(f"{where}: expected a table of pattern = [markers], got {value!r}")
    return {str(k): _strings(v, f"{where} {k!r}") for k, v in value.items()}


def _strings(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise HarnessError(f"{where}: expected a list of non-empty strings, got {value!r}")
    return tuple(value)


def matches(pattern: str, path: str) -> bool:
    """Whether ``path`` (``/``-separated) matches the glob ``pattern`` (see the module's docstring)."""
    return _compiled(pattern).fullmatch(path) is not None


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str]:
    if not pattern.strip("/"):
        raise HarnessError(f"[tool.harness.select]: empty pattern {pattern!r}")
    if "/" not in pattern.rstrip("/"):
        pattern = f"**/{pattern}"
    parts, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            parts.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            parts.append(".*")
            i += 2
        elif pattern[i] == "*":
            parts.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            parts.append("[^/]")
            i += 1
        else:
            parts.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(parts).rstrip("/") + ("(?:/.*)?" if pattern.endswith("/") else ""))
