"""``harness run --changed-since REF [--shadow]``: the run's selection from its one collection, the history's
footprints and git's diff (``harness.select``); and ``harness selection REPORT...``, the rates across builds.

Selection skips a test by handing its phase's pytest a list (``harness.select.SELECTION``): the plugin
marks each listed test skipped with the reason, so JUnit and report.json show it skipped by selection,
never absent. In shadow every test runs and the list only marks what selection would have skipped. A
history that cannot say (none, of another suite, corrupt, without footprints), no merge base or a failed
collection: every test runs, and one line says why. An unknown REF or ``--shadow`` alone: bad input.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from harness.errors import HarnessError
from harness.report.environment import versions
from harness.report.previous import History
from harness.report.store import load, write_atomic
from harness.select import PIPELINE_MODES, SELECT, SELECTION, changes, choose, profiler, record, rules, table


def packages(harness_table: dict) -> str:
    """The packages whose files footprints record, for the plugin (``profiler.PACKAGES_VARIABLE``)."""
    return ",".join(rules.load(harness_table.get("select")).packages)


CI = SELECT  # a pipeline's: "shadow", "on" or "off", for its pull-request builds (docs/selection.md)


def asked(ref: str | None, shadow: bool, env: Mapping[str, str]) -> tuple[str | None, bool]:
    """``--changed-since`` and ``--shadow`` as given, else from ``HARNESS_SELECT`` on a pull-request build
    (REF: ``origin/<its base branch>``); a build of a branch runs everything. ``--shadow`` alone, or
    another value of the variable: bad input."""
    if shadow and not ref:
        raise HarnessError("--shadow records what --changed-since REF would select: give REF too")
    mode = env.get(CI)
    if mode and mode not in PIPELINE_MODES:  # empty: unset, as a CI system leaves it
        raise HarnessError(f"{CI}={mode!r}: expected one of {', '.join(PIPELINE_MODES)}")
    if ref or not mode or mode == "off":
        return ref, shadow
    base = env.get("GITHUB_BASE_REF") or (
        env.get("BUILDKITE_PULL_REQUEST_BASE_BRANCH")
        if env.get("BUILDKITE_PULL_REQUEST", "false") != "false"
        else None
    )
    if not base:
        print(f"harness: {CI}={mode}: not a pull request's build, so every test runs", file=sys.stderr)
        return None, False
    return f"origin/{base}", mode == "shadow"


def prepare(
    ref: str,
    shadow: bool,
    history: History | None,
    harness_table: dict,
    found: dict[str, list[str]] | None,
    rootdir: str | None,
    out: Path,
    env: dict,
) -> dict:
    """The selection's phases.json section (``history``: the run's one previous run, read once); sets
    ``env``'s list for the phases' pytest."""
    mode = "shadow" if shadow else "on"
    given = rules.load(harness_table.get("select"))
    root = Path(rootdir) if rootdir else Path.cwd()
    change: changes.Change | None = None
    try:
        change = changes.changed(ref, root)
        prior: tuple | str = _footprints(history)
    except changes.NoBase as why:
        prior = str(why)
    tests = list(dict.fromkeys(n for ids in (found or {}).values() for n in ids))
    if found is None:
        prior = "the suite's collection failed"
    if isinstance(prior, str) or change is None:
        made = choose.choose(tests, str(prior), {}, [], given)
    else:
        footprints, markers, unit, failed = prior
        own = _prefix(out, change.top)  # this run's own directory is never a change
        given = replace(given, ignore=(*given.ignore, own)) if own else given
        prefix = _prefix(root, change.top)
        made = choose.choose(
            tests, footprints, markers, change.files, given, unit, prefix, change.renamed, failed
        )
    files = change.files if change else ()
    section = record.section(mode, ref, change.base if change else None, files, made)
    if made.skipped:
        path = out / "selection-skipped.json"
        write_atomic(path, json.dumps({"mode": mode, "ref": ref, "skipped": list(made.skipped)}) + "\n")
        env[SELECTION] = str(path.resolve())
    for line in record.lines(section):
        print(f"harness: {line}", file=sys.stderr)
    return section


def _footprints(history: History | None) -> tuple | str:
    """The history's footprints, markers, engine groups' ``unit`` and failed tests; else why it has none."""
    if history is None:
        return "no history given (--history or HARNESS_HISTORY)"
    if history.note is not None:
        return history.note
    if history.report is None:
        return f"{history.source} is {history.kind}, not a report: it records no footprints"
    decoded = table.decode(history.report.get("footprints"))
    if isinstance(decoded, str):
        return f"{history.source}: {decoded}"
    moved = _moved(history.report.get("versions"), versions(Path.cwd()))
    if moved is not None:
        return f"{history.source} ran on {moved}: no diff shows that change"
    return (*decoded, history.groups.unit, history.failed)


# What a diff cannot show and that changes what a test does: the interpreter and the heaviest dependencies.
# (Not the tested package's own version: in its own tree, e.g. vLLM's, that moves with every commit.)
ENVIRONMENT = ("python", "torch", "transformers")


def _moved(then: object, now: Mapping[str, object]) -> str | None:
    """The first of ``ENVIRONMENT`` the history's run had at another version than this run, said as
    ``python 3.11.7, this run 3.12.3``; None when all agree. A history that names no version of one
    (an older report) is taken at its word for the others."""
    known = then if isinstance(then, dict) else {}
    for name in ENVIRONMENT:
        if name in known and known[name] != now.get(name):
            return f"{name} {known[name]}, this run {now.get(name) or 'none'}"
    return None


def _prefix(root: Path, top: Path) -> str:
    try:
        relative = root.resolve().relative_to(top.resolve()).as_posix()
    except ValueError:
        return ""
    return "" if relative == "." else f"{relative}/"


def main(args) -> int:
    """``harness selection REPORT...``: each build's selected share and false greens, then the median share
    and the false-green rate; exit 1 when a build had a false green."""
    found = []
    for path in args.reports:
        report = load(Path(path))  # one that cannot be read: one line, exit 2
        found.append((str(path), report.get("selection")))
    text, missed = record.rates(found)
    print("\n".join(text))
    return 1 if missed else 0


def arm_footprints(env: dict[str, str], ref: str | None, shadow: bool) -> None:
    """Footprints are recorded where selection is in use: a ``--changed-since`` or ``--shadow`` run, or a
    pipeline that selects (``HARNESS_SELECT``, whose branch builds refresh the kept footprints); a
    ``HARNESS_FOOTPRINTS`` the user set is kept."""
    if ref or shadow or env.get(CI, "off") != "off":
        env.setdefault(profiler.RECORD, "1")
