"""How one process's ledger file takes its lines: one ``write`` system call a line, on an append-only
descriptor.

A written line is in the kernel's page cache: a process killed right after (SIGKILL, ``os._exit``) keeps
it, and a host crash loses it unless synced. ``O_APPEND`` puts each line whole at the file's end, against
another thread's or process's, so a file's size is its content. A full disk (``ENOSPC``, ``EDQUOT``, or
``EFBIG`` past ``RLIMIT_FSIZE``) is an ``OSError`` of the ``write``, which the writer reports.

A writer holds a shared advisory lock on its file while it is open: it says that a live process still
writes there (``in_use``), which is how another process of the worker tells a live runner from one whose
process died (``harness.tracking.siblings``). Writers of one name share the lock as they share the file.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class Appended:
    """A ledger file opened to take this process's lines after those already there (``found``: their
    bytes). Never through a symlink: the ledger would land (and be counted) elsewhere."""

    def __init__(self, path: Path) -> None:
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        self.descriptor = os.open(path, flags, 0o644)
        self.found = os.fstat(self.descriptor).st_size
        try:
            fcntl.flock(self.descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:  # a file system without locks: in_use then reads it as written
            pass

    def torn(self) -> bool:
        """Whether the lines already there end mid-line (a predecessor killed in a write)."""
        return bool(self.found) and os.pread(self.descriptor, 1, self.found - 1) != b"\n"

    def write(self, data: bytes) -> None:
        while data:  # a regular file takes a line whole; a short write (the disk filled) goes on or raises
            data = data[os.write(self.descriptor, data) :]

    def sync(self) -> None:
        os.fsync(self.descriptor)

    def close(self) -> None:
        os.close(self.descriptor)


def in_use(path: Path) -> bool:
    """Whether a live process writes ``path`` (holds the lock an ``Appended`` takes); a file system
    without locks reads as in use."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held (BlockingIOError), or no locks here
        return True
    finally:
        os.close(descriptor)
    return False


class Lost:
    """What a writer writes to once its file refused a line: nothing, at no cost."""

    def write(self, data: bytes) -> None:
        pass

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass
