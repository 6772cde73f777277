"""The previous run a ``harness run`` uses, read once (``harness.report.previous.History``) and handed to
every phase's pytest as the files it reads: ``configurations.json`` (``HARNESS_CONFIGURATIONS``: the order,
failures first), ``test-timeouts.json`` (``HARNESS_TEST_TIMEOUTS``) and the GPU-free list.

It is named by one of ``--history`` / ``HARNESS_HISTORY`` (CI hands over the base branch's last report, or
a pull request's own previous attempt: one that is missing, unreadable, of another format, suite or
platform is one line in the summary, ``no history: ...``, and the run goes on without it) or
``--durations-from`` / ``HARNESS_DURATIONS_FROM`` (a file the user named: strict, bad input when it cannot
be read). Both name the run that orders and weighs this one, so both together are refused in one line, as
is ``--timeouts-from-history`` without either;
pytest-shard's ``--harness-durations`` after ``--`` weighs the split only, so beside ``--history`` both
are honoured, and beside ``--durations-from`` (two weights for one split) it is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.config import options
from harness.config.variables import CONFIGURATIONS, ENGINE_GROUPS, HISTORY, TEST_TIMEOUTS
from harness.errors import HarnessError
from harness.report import previous
from harness.report.gpu_free import GPU_PLATFORMS
from harness.report.previous import History
from harness.report.store import write_atomic

VARIABLE = HISTORY
DURATIONS = options.DURATIONS_FROM.variable


@dataclass(frozen=True)
class Given:
    """The run's previous run (``history``; None: none named), what its split weighs by (``weights``), and
    what phases.json records of a ``--history`` (``record``)."""

    history: History | None
    weights: History | None
    record: dict | None


def choose(
    args, env: Mapping[str, str], durations: str | None, suite: str, platform: str, mode: str | None
) -> Given:
    """The previous run the flags and variables name, each file read once (see the module for the rules);
    ``mode``: the run's GPU-free mode (``only``: the CPU job reads its GPU cell's history)."""
    named = {
        f"--durations-from (or {DURATIONS})": options.value(options.DURATIONS_FROM, args.durations_from, env),
        f"--history (or {VARIABLE})": options.value(options.HISTORY_OPTION, args.history, env),
        "--harness-durations after --": durations,
    }
    given = [(flag, value) for flag, value in named.items() if value]
    both = {f"--history (or {VARIABLE})", "--harness-durations after --"}  # the rest, and the split's weights
    if len(given) > 1 and {flag for flag, _ in given} != both:
        (first, one), (second, other) = given[:2]
        raise HarnessError(
            f"{first} {one!r} and {second} {other!r} both name the run this one is weighed by: give one"
        )
    strict = named[f"--durations-from (or {DURATIONS})"]
    if getattr(args, "timeouts_from_history", False) and not (strict or named[f"--history (or {VARIABLE})"]):
        raise HarnessError(  # else the flag would be dropped without a word: no test given a learned timeout
            f"--timeouts-from-history needs --history or --durations-from (or {VARIABLE}): what would it "
            "learn from?"
        )
    if strict:  # named by the user: strict
        found = previous.read(strict)
        return Given(found, found, None)
    weighs = previous.durations(durations) if durations else None
    places = named[f"--history (or {VARIABLE})"]
    if places is None:
        return Given(None, weighs, None)
    platforms = GPU_PLATFORMS if mode == "only" else (platform,)
    found = previous.first_usable(places, suite, platforms, what=f"--history or {VARIABLE}")
    return Given(found, weighs or found, found.record())


def configurations(history: History | None, out: Path, env: dict) -> None:
    """``configurations.json`` for the phases' order and safety net, where the history has any."""
    if history is None or history.note is not None:
        return
    path = out / "configurations.json"
    write_atomic(path, json.dumps(dict(history.configurations), indent=1) + "\n")
    env[CONFIGURATIONS] = str(path.resolve())
    if history.groups.packages:  # failures first moves these whole too (harness.split.Groups.block)
        groups = out / "engine-groups.json"
        write_atomic(groups, json.dumps({"packages": sorted(history.groups.packages)}, indent=1) + "\n")
        env[ENGINE_GROUPS] = str(groups.resolve())


def timeouts(
    history: History | None, bound: float, collected: Iterable[Sequence[str]] | None, out: Path, env: dict
) -> None:
    """``test-timeouts.json``: each recorded test's learned timeout, from what its place in this run's
    order can cost it (``History.timeouts``; ``collected``: each phase's node ids in their order)."""
    if history is None or history.note is not None:
        return
    path = out / "test-timeouts.json"
    write_atomic(path, json.dumps(history.timeouts(bound, collected), indent=1) + "\n")
    env[TEST_TIMEOUTS] = str(path.resolve())
