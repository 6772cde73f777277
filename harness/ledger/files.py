"""How one process's ledger file takes its lines: copied into a shared memory map, or, where the file
system maps no files, one ``write`` system call each.

A line copied into a shared map is in the kernel's page cache once copied, as a written one is: a process
killed right after (SIGKILL, ``os._exit``) keeps it, and a host crash loses it unless synced, alike. The
map costs no system call a line: inside a pytest run of trivial tests the ``write`` of a test's line took
5-6 µs (1.4 µs alone in a loop), most of what a test's ledger line cost (docs/measurements.md).

A mapped file is grown ahead in ``CHUNK`` steps. Its tail past the last line is zeros until ``close`` cuts
it off; the file of a process killed meanwhile keeps that tail, and readers drop a file's trailing zeros.
A file has one writing process at a time (an advisory lock), which a map needs: a second process's lines
would land past the other's zeros and be cut off.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import threading
from pathlib import Path

CHUNK = 1 << 20  # grown a mebibyte at a time: about 8000 test lines; the zeros take no disk (a sparse tail)


def claim(path: Path) -> Mapped | Appended | None:
    """``path`` opened to take this process's lines after those already there, or None while another live
    process writes it. Never through a symlink: the ledger would land (and be counted) elsewhere."""
    descriptor = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    except OSError:  # a file system without locks: one writer a name, as the harness names them
        pass
    end = _end(descriptor)
    try:
        file: Mapped | Appended = Mapped(descriptor, end)
    except (OSError, ValueError):  # a file system that maps no files
        os.ftruncate(descriptor, end)
        file = Appended(descriptor, end)
    if end and os.pread(descriptor, 1, end - 1) != b"\n":
        file.write(b"\n")  # a predecessor killed mid-line: keep the first line here off its torn one
    return file


def in_use(path: Path) -> bool:
    """Whether a live process writes ``path``: holds the lock ``claim`` took (a file system without locks
    reads as in use)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:  # held (BlockingIOError), or no locks here
        return True
    finally:
        os.close(descriptor)
    return False


def _end(descriptor: int) -> int:
    """Where the lines already in the file end: before the zero tail a killed predecessor left."""
    size = os.fstat(descriptor).st_size
    return len(os.pread(descriptor, size, 0).rstrip(b"\0")) if size else 0


class Mapped:
    """A file written through a shared map, at the map's own position. ``found``: the bytes of lines it
    had."""

    def __init__(self, descriptor: int, end: int) -> None:
        self.descriptor, self.found = descriptor, end
        os.ftruncate(descriptor, _ahead(end))
        self._map = mmap.mmap(descriptor, _ahead(end))
        self._map.seek(end)
        self._grow = threading.Lock()

    def write(self, data: bytes) -> None:
        """One call that copies the line and moves the position, whole against another thread's (the
        interpreter's lock is held through it): a test's line takes no lock of Python's, which cost a
        third of the line here."""
        try:
            self._map.write(data)
        except ValueError:  # past the map's end, where nothing was copied: grow it (the file too), then copy
            with self._grow:
                end = self._map.tell() + len(data)
                if end > len(self._map):  # not grown by another thread meanwhile
                    self._map.resize(_ahead(end))
            self.write(data)

    def sync(self) -> None:
        """Through a host crash: the map's pages, then the file's size."""
        self._map.flush()
        os.fsync(self.descriptor)

    def close(self) -> None:
        end = self._map.tell()
        self._map.close()
        os.ftruncate(self.descriptor, end)
        os.close(self.descriptor)

    def detach(self) -> None:
        """In a forked child: let go of the parent's file as it is, which the parent goes on writing."""
        self._map.close()
        os.close(self.descriptor)


class Appended:
    """A file written one ``write`` system call a line, on an append-only descriptor: the kernel keeps each
    line whole against another thread's."""

    def __init__(self, descriptor: int, end: int) -> None:
        self.descriptor, self.found = descriptor, end  # the bytes of lines it had

    def write(self, data: bytes) -> None:
        while data:  # a regular file takes a line whole; a short write goes on where it stopped
            data = data[os.write(self.descriptor, data) :]

    def sync(self) -> None:
        os.fsync(self.descriptor)

    def close(self) -> None:
        os.close(self.descriptor)

    detach = close


def _ahead(end: int) -> int:
    """The file's size while its lines end at ``end``: the next whole chunk past it."""
    return (end // CHUNK + 1) * CHUNK
