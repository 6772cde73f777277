"""A run's shard: ``--shard i/N``, Buildkite's parallel-job variables or pytest-shard's flags after
``--``, and the one split of the run's one collection that every phase applies.

The split is made once, from the node ids pytest itself collected for the run (its ``python_files``,
``testpaths``, rootdir, ``-m``/``-k``; ``harness.run.selection``), each test counted in the first phase
that selects it; whole files are the units (a file's shared engine starts in one job only), weighed by
recorded seconds (``harness.report.previous.History.plan``). Every job of a build computes the same split
alone: it depends on the node ids and the durations only, never on order, ``PYTHONHASHSEED`` or the
checkout's location.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from harness import split
from harness.errors import HarnessError
from harness.report import previous
from harness.report.previous import History
from harness.report.store import write_atomic
from harness.run.resume import _arguments
from harness.split import Shard

FLAGS = ("--num-shards", "--shard-id")  # pytest-shard's, as the user may pass them after --
DURATIONS = "--harness-durations"  # the plugin's: under harness run, what the run's split weighs by
_WHOLE = re.compile(r"[0-9]{1,7}")


def parse_shard(spec: str | None, env: Mapping[str, str] = os.environ) -> Shard | None:
    """``"i/N"`` (0-based) → ``Shard``; with no spec, Buildkite's parallel-job variables fill it."""
    source = "--shard"
    if spec is None:
        job, jobs = env.get("BUILDKITE_PARALLEL_JOB"), env.get("BUILDKITE_PARALLEL_JOB_COUNT")
        if job is None and jobs is None:
            return None
        if job is None or jobs is None:
            missing = "BUILDKITE_PARALLEL_JOB" if job is None else "BUILDKITE_PARALLEL_JOB_COUNT"
            raise HarnessError(f"{missing} is not set but its partner is; cannot pick a shard")
        spec, source = f"{job}/{jobs}", "BUILDKITE_PARALLEL_JOB/BUILDKITE_PARALLEL_JOB_COUNT"
    return Shard.parse(spec, source)


def flags(extra: list[str]) -> tuple[Shard | None, str | None, list[str]]:
    """pytest-shard's ``--num-shards``/``--shard-id`` and the plugin's ``--harness-durations`` among the
    arguments after ``--``, read as pytest reads them (``--flag V`` or ``--flag=V``, no abbreviation, the
    last one counts): the shard they ask for, the durations, and the arguments without them (the run makes
    the split, so neither its collection nor any phase's pytest splits again, and no pytest takes the
    durations file for a test path). A half pair, a value that is not a whole number, an id out of range:
    one ``HarnessError`` line."""
    found: dict[str, str] = {}
    kept: list[str] = []
    index = 0
    while index < len(extra):
        arg = extra[index]
        if arg == "--":  # what follows is pytest's positional arguments
            kept += extra[index:]
            break
        name = next((flag for flag in (*FLAGS, DURATIONS) if arg == flag or arg.startswith(flag + "=")), None)
        if name is None:
            kept.append(arg)
        elif arg == name:
            found[name] = extra[index + 1] if index + 1 < len(extra) else ""
            index += 1
        else:
            found[name] = arg[len(name) + 1 :]
        index += 1
    values: dict[str, int | None] = {}
    for name in FLAGS:
        value = found.get(name)
        if value is not None and not _WHOLE.fullmatch(value):
            raise HarnessError(f"pytest argument {name} {str(value)[:40]!r}: expected a whole number")
        values[name] = None if value is None else int(value)
    return split.from_flags(values["--num-shards"], values["--shard-id"]), found.get(DURATIONS) or None, kept


def decide(shard: Shard, own: Mapping[str, list[str]], history: History) -> tuple[dict[str, list[str]], dict]:
    """The run's one split: per phase, this shard's node ids (of ``own``, each phase's tests that no
    earlier phase selects), and what the shard records of it (``harness.split.Plan.record``): the
    ``history``'s plan (``harness.report.previous.History.plan``), the one the CI generator predicts."""
    selection = [nodeid for tests in own.values() for nodeid in tests]
    made = history.plan(selection, shard.count)
    units = history.units()
    record = {
        **made.record(shard, {"durations": history.described, "units": units}),
        "source": history.described,
    }
    mine = set(record["assigned"])
    return {phase: [n for n in tests if n in mine] for phase, tests in own.items()}, record


def weights(history: History | None, rootdir: Path | None) -> History:
    """What the split weighs by: the run's history, else pytest-split's ``.test_durations`` in the rootdir
    (read by the one loader), else nothing (whole files by count)."""
    if history is not None and history.note is None:
        return history
    found = rootdir / ".test_durations" if rootdir else None
    return previous.durations(found) if found is not None and found.is_file() else History()


def arguments_file(
    out: Path, phase: str, tests: list[str], collected: list[str], rootdir: Path | None
) -> Path:
    """``resume/<phase>.args`` in the run directory (pytest reads it as ``@FILE``): the arguments that
    run exactly ``tests`` of the phase's ``collected`` node ids, paths made relative to the working
    directory where pytest's rootdir is another."""
    lines = _arguments([_here(t, rootdir) for t in tests], [_here(t, rootdir) for t in collected])
    path = out / "resume" / f"{phase}.args"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "".join(f"{line}\n" for line in lines))
    return path


def _here(nodeid: str, rootdir: Path | None) -> str:
    """A node id (relative to pytest's rootdir) as a command-line argument from the working directory."""
    if rootdir is None or rootdir == Path.cwd():
        return nodeid
    file, sep, rest = nodeid.partition("::")
    return Path(os.path.relpath(rootdir / file)).as_posix() + sep + rest
