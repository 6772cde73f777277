"""The run directory: one run at a time (a lock), and only the harness's own files cleared before it.

A second ``harness run`` into a directory in use would merge its ledger into the first's report, or clear
it mid-run; it fails at once instead. A directory that is not empty and holds no run's lock file is the
user's, not a run directory: it is refused, so a ``summary.md`` or ``junit/*.xml`` of theirs is never
taken for ours. Clearing removes only what a run writes (ledger ``*.jsonl``, JUnit ``*.xml``, report
files, resume lists, a killed atomic write's ``.tmp``), never follows a symlink out of the directory, and
leaves anything else a user put there.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from harness.config.suites import PHASE_NAME
from harness.errors import HarnessError, InfrastructureError

LOCK = ".harness-run.lock"
REPORT_FILES = (
    "phases.json",
    "report.json",
    "junit.xml",
    "summary.md",
    "timeline.svg",
    "report.html",
    "configurations.json",  # the previous run's configurations, when --durations-from gave one
    "engine-groups.json",  # its package groups, which failures first moves whole (HARNESS_ENGINE_GROUPS)
    "test-timeouts.json",  # per-test timeouts from the history, with --timeouts-from-history
    "phases-collected.json",  # the run's one collection (harness.run.selection)
    "selection.json",  # what pytest read in the pass-through arguments (harness.run.probe)
)
OWN = {"ledger": ".jsonl", "junit": ".xml", "resume": ".args"}  # subdirectory → the files a run puts there


def segment(what: str, name: str) -> str:
    """``name`` if it can be one path segment in a run directory, else a ``HarnessError`` naming it."""
    if not PHASE_NAME.fullmatch(name):  # no '.', '..', '/' or NUL: the one rule for suite and phase names
        raise HarnessError(
            f"{what} {name!r}: a run directory names it, so only letters, digits, '_', '.', '-' "
            "(a letter or digit first, at most 100)"
        )
    return name


@contextlib.contextmanager
def locked(out: Path) -> Iterator[int]:
    """Hold the run directory's lock for the run (yields its descriptor, which a phase's keeper holds
    too); a directory in use, or one with files and no run's lock, is one ``HarnessError`` line."""
    if "\0" in str(out):
        raise HarnessError(f"--out {str(out)!r}: a path cannot hold a NUL byte")
    if out.exists() and not out.is_dir():
        raise HarnessError(f"--out {out}: exists and is not a directory")
    try:
        if out.is_dir() and not (out / LOCK).exists() and any(out.iterdir()):
            raise HarnessError(
                f"--out {out}: not empty and not a harness run directory (give a new or empty one)"
            )
        out.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        raise HarnessError(f"--out {out}: cannot use it as a run directory ({error.strerror})") from None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "?"
            raise HarnessError(f"--out {out}: another harness run (pid {holder}) is using it") from None
        try:
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        except OSError as error:  # a full disk: the machine's fault, one line
            raise InfrastructureError(f"{out / LOCK}: cannot write it ({error.strerror})") from None
        yield descriptor
    finally:
        os.close(descriptor)


def clear(out: Path) -> None:
    """Remove what an earlier run wrote here, so it cannot merge into this run's report."""
    for name in REPORT_FILES:
        _remove(out / name)
    for entry in out.iterdir():
        if entry.name.startswith(".") and entry.name.endswith(".tmp"):
            _remove(entry)  # a write_atomic killed before its rename
    for name, suffix in OWN.items():
        directory = out / name
        if directory.is_symlink():
            raise HarnessError(f"--out {out}: {name}/ is a symlink; the harness writes only inside {out}")
        if directory.is_dir():
            _clear_tree(directory, suffix)


def _clear_tree(directory: Path, suffix: str) -> None:
    """Our files below ``directory`` (not following symlinks), then the folders left empty."""
    for entry in os.scandir(directory):
        if entry.is_dir(follow_symlinks=False):
            _clear_tree(Path(entry.path), suffix)
        elif entry.is_symlink() or entry.name.endswith((suffix, ".tmp")):
            _remove(Path(entry.path))
    with contextlib.suppress(OSError):  # not empty: a user's file stays, and so does its folder
        directory.rmdir()


def _remove(path: Path) -> None:
    """Unlink a regular file or a symlink itself (never what it points to)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        path.unlink()
