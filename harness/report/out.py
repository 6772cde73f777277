"""Where a command's ``--out`` goes: a regular file, written whole, or one line and exit 2.

Every file a command writes (``harness flaky --out``, ``harness merge --out``'s report files, a run
directory's report files) is written atomically: a temporary file beside it, then a rename, so a kill
leaves the old file or the new one. A rename replaces whatever the path held, so it is done only onto a
regular file or a new path: a device (``--out /dev/null`` as root would replace the machine's
``/dev/null``), a FIFO, a socket or a directory there is refused in one ``HarnessError`` line before
anything is written. A symlink is followed to what it names, which must be a regular file or nothing.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from harness.errors import HarnessError
from harness.report.store import write_atomic


def target(path: str | Path, what: str = "--out", inputs: Iterable[str | Path] = ()) -> Path:
    """The path to write for ``path``: itself, or the file its symlink names; anything else there but a
    regular file, or one of the ``inputs`` the command reads (it would be lost), is one ``HarnessError``
    line."""
    path = Path(path)
    mode = _mode(path, what)  # first: a path the system cannot look at is one line
    _apart(path, inputs, what, folder=False)
    if mode is None:
        return path  # a new file
    if stat.S_ISDIR(mode):
        raise HarnessError(f"{what} {path}: is a directory; give a file's path")
    if not stat.S_ISREG(mode):
        raise HarnessError(f"{what} {path}: not a regular file ({_kind(mode)}); it is never replaced")
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def write(path: str | Path, text: str, what: str = "--out", inputs: Iterable[str | Path] = ()) -> Path:
    """Write ``text`` to ``path`` atomically, as ``target`` allows; where it went. A full disk is the
    machine's (``InfrastructureError``, exit 4); any other refusal of the system is one line, exit 2."""
    where = target(path, what, inputs)
    try:
        write_atomic(where, text)
    except OSError as error:  # (a full disk is already the machine's: InfrastructureError)
        raise HarnessError(f"{what} {path}: cannot write it ({error.strerror or error})") from None
    return where


def directory(path: str | Path, what: str = "--out", inputs: Iterable[str | Path] = ()) -> Path:
    """A directory the command writes files into: new, or an existing directory; anything else at that
    path, or the run directory of one of the ``inputs`` it reads (its report would be overwritten), is one
    ``HarnessError`` line."""
    path = Path(path)
    mode = _mode(path, what)  # first: a path the system cannot look at is one line
    _apart(path, inputs, what, folder=True)
    if mode is None:
        return path
    if not stat.S_ISDIR(mode):
        raise HarnessError(f"{what} {path}: exists and is not a directory ({_kind(mode)})")
    return path


def _apart(path: Path, inputs: Iterable[str | Path], what: str, folder: bool) -> None:
    """One ``HarnessError`` line where writing ``path`` (a file, or a ``folder`` of report files) would
    overwrite an input the command reads: a report file, or a run directory's ``report.json``."""
    mine = Path(os.path.realpath(path))
    for given in inputs:
        theirs = Path(os.path.realpath(given))
        if folder and theirs.name == "report.json" and not theirs.is_dir():
            theirs = theirs.parent
        elif not folder and theirs.is_dir():
            theirs = theirs / "report.json"
        if theirs == mine:
            raise HarnessError(f"{what} {path}: is where {given} is read from; give the output its own place")


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
    )
    return next((name for test, name in kinds if test(mode)), "not a file")


def _mode(path: Path, what: str) -> int | None:
    """What is at ``path`` (its ``st_mode``, links followed), or None where nothing is; a path the system
    cannot look at is one ``HarnessError`` line."""
    if "\0" in str(path):
        raise HarnessError(f"{what} {str(path)!r}: a path cannot hold a NUL byte")
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as error:
        raise HarnessError(f"{what} {path}: cannot write there ({error.strerror})") from None
