"""Which tests a change selects, and why each one: pure, from the tests collected, the history's footprints
and markers, the changed files and ``[tool.harness.select]``.

A test is selected when the history does not know it or it failed there, when its file changed, when its
footprint holds a changed file, when it carries a marker a changed file maps to, or when a test of its
engine group is selected (the group stays whole). Every test is selected, with one line saying why, when a
changed file is global or no footprint and no rule explains it, or when the history cannot say
(``footprints`` is that line). Nothing else is skipped; each skipped test is named.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from harness.select.rules import Rules

MODES = ("on", "shadow")


@dataclass(frozen=True)
class Selection:
    selected: dict[str, str]  # node id -> why it runs
    skipped: tuple[str, ...]  # node ids selection leaves out (in collection order)
    everything: str | None  # why every test runs, or None
    ignored: tuple[str, ...] = ()  # changed files the rules ignore


def choose(
    tests: Sequence[str],
    footprints: Mapping[str, Collection[str]] | str,
    markers: Mapping[str, Collection[str]],
    changed: Sequence[str],
    rules: Rules,
    unit: Callable[[str], str] = lambda nodeid: nodeid,
    prefix: str = "",
    renamed: Mapping[str, str] | None = None,
    failed: Collection[str] = (),
) -> Selection:
    """The selection (see the module doc). ``changed`` are paths from the repository's top; footprints and
    node ids are relative to pytest's rootdir, which is ``prefix`` (``""`` or ``"sub/"``) below the top.
    ``renamed`` (new path -> old, from the top): a renamed file is explained where its old path is.
    ``failed``: the tests that failed or errored in the history; each runs again (skipped, a red test
    would turn green unseen)."""
    tests, failed = list(dict.fromkeys(tests)), frozenset(failed)
    if isinstance(footprints, str):
        return _everything(tests, f"the history cannot say: {footprints}")
    relative = [_below(p, prefix) for p in changed]
    old = {_below(new, prefix): _below(was, prefix) for new, was in (renamed or {}).items()}
    ignored = tuple(p for p in relative if rules.ignored(p))
    relevant = [p for p in relative if not rules.ignored(p)]
    known = {name for files in footprints.values() for name in files}
    files = {nodeid.split("::")[0] for nodeid in tests} | {t.split("::")[0] for t in footprints}
    for path in relevant:  # the strongest reason first: a global file
        if rules.is_global(path):
            return _everything(tests, f"{path} changed, and it is global", ignored)
    wanted: dict[str, str] = {}  # marker -> the changed file that maps to it
    for path in relevant:
        for marker in sorted(rules.marked(path)):
            wanted.setdefault(marker, path)
        if old.get(path) in known or old.get(path) in files:  # its tests meet its old path
            continue
        if path not in known and path not in files and not rules.marked(path) and not _package(path, known):
            if _test_module(path):  # another suite's (or a deselected) test module: no test here ran it
                continue
            return _everything(tests, f"{path} changed, and no footprint and no rule explains it", ignored)
    touched = set(relevant)
    for path in relevant:  # a package's __init__ ran at the first import of any of its modules (maybe
        if (folder := _folder(path)) is not None:  # in another test's time): it counts for them all
            touched |= {name for name in known if name.startswith(folder)}
    selected: dict[str, str] = {}
    for nodeid in tests:
        why = _why(nodeid, footprints, markers, touched, wanted, failed)
        if why is not None:
            selected[nodeid] = why
    groups: dict[str, list[str]] = {}
    for nodeid in tests:
        groups.setdefault(unit(nodeid), []).append(nodeid)
    for members in groups.values():
        first = next((n for n in members if n in selected), None)
        for nodeid in members if first is not None else ():
            selected.setdefault(nodeid, f"its engine group runs ({first})")
    ordered = {nodeid: selected[nodeid] for nodeid in tests if nodeid in selected}
    made = Selection(ordered, tuple(n for n in tests if n not in selected), None, ignored)
    _check(made, footprints, touched, unit, failed)
    return made


def _check(
    made: Selection,
    footprints: Mapping[str, Collection[str]],
    touched: set[str],
    unit,
    failed: Collection[str],
) -> None:
    """At run time, the promise a wrong answer would break silently in CI: no skipped test met the change,
    failed in the history or shares an engine group with a selected one (a bug of ours: exit 4, never a
    silent skip)."""
    groups = {unit(nodeid) for nodeid in made.selected}
    for nodeid in made.skipped:
        met = nodeid not in footprints or touched.intersection(footprints[nodeid])
        if met or nodeid.split("::")[0] in touched or unit(nodeid) in groups or nodeid in failed:
            raise RuntimeError(f"selection would skip {nodeid}, which the change touches")


def _why(
    nodeid: str,
    footprints: Mapping[str, Collection[str]],
    markers: Mapping[str, Collection[str]],
    touched: set[str],
    wanted: Mapping[str, str],
    failed: Collection[str] = (),
) -> str | None:
    if nodeid not in footprints:
        return "the history does not know it"
    if nodeid in failed:
        return "it failed in the history"
    file = nodeid.split("::")[0]
    if file in touched:
        return f"its file changed ({file})"
    met = sorted(touched.intersection(footprints[nodeid]))
    if met:
        return f"it ran {met[0]}" + (f" and {len(met) - 1} more changed files" if len(met) > 1 else "")
    for marker in sorted(markers.get(nodeid, ())):
        if marker in wanted:
            return f"marker {marker} ({wanted[marker]} changed)"
    return None


def _test_module(path: str) -> bool:
    """A test module by pytest's default ``python_files`` (``test_*.py``, ``*_test.py``; never a conftest,
    which is global). One this run did not collect and no footprint holds is code no test here ran: its
    tests are another suite's (or deselected), and a test that imports it, in its process or a child, has
    it in its footprint. A suite that reads test modules as data maps them in ``[tool.harness.select]``."""
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _below(path: str, prefix: str) -> str:
    return path[len(prefix) :] if prefix and path.startswith(prefix) else path


def _folder(path: str) -> str | None:
    """``a/b/`` for a changed ``a/b/__init__.py``."""
    return path[: -len("__init__.py")] if path.endswith("/__init__.py") else None


def _package(path: str, known: set[str]) -> bool:
    folder = _folder(path)
    return folder is not None and any(name.startswith(folder) for name in known)


def _everything(tests: list[str], why: str, ignored: tuple[str, ...] = ()) -> Selection:
    return Selection({nodeid: why for nodeid in tests}, (), why, ignored)
