"""The crash-safe runner ledger: one JSON-lines file per worker, merged into records when read.

Each event is in the kernel's hands (runner events also on disk) before the code it describes goes on,
so a worker killed at any point (SIGKILL, ``os._exit`` from pytest-timeout) loses nothing already written
(``harness.ledger.files``). Readers tolerate a torn last line and report a runner that started but never
stopped as ``never-stopped``. A file that refuses a line (a full disk) is said in one line on stderr, and
the process goes on recording nothing: its tests run on, never a traceback or a signal.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
import weakref
from collections.abc import Iterable

# what the encoder makes of a str, called directly
from json.encoder import encode_basestring_ascii as _quoted
from pathlib import Path
from typing import Any

from harness.ledger import files
from harness.ledger.notable import NOTABLE
from harness.ledger.redaction import Redactor

_ENCODER = json.JSONEncoder(default=str)  # one encoder for every event: json.dumps builds one per call


class LedgerWriter:
    """Appends events to ``<directory>/<worker>.jsonl``; one writer per process (``worker``: ``gw0``...,
    ``main`` outside xdist, ``controller`` for what only the xdist controller sees, ``<worker>.<pid>`` in a
    test's forked or spawned child)."""

    def __init__(self, directory: str | os.PathLike, worker: str, args: Iterable[str] = ()):
        """``args``: the session's command line beside ``sys.argv`` (an xdist worker's is the controller's),
        whose options named like a credential are redacted, with the environment's, from every line."""
        self.directory = Path(directory)
        self._redactor = Redactor(os.environ, [*sys.argv, *args])
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()  # the memory sampler writes from its own thread
        self.notable = False  # whether this writer wrote a NOTABLE event
        self._announced: tuple[str | None, str] = (None, "null")  # the last test line's ``next``, and as JSON
        self._open(worker)
        # a test that forks (vLLM's fork_new_process_for_each_test) records in the child too: no write is
        # half done at the fork, and the child appends to a file and id series of its own
        this = weakref.ref(self)

        def at_fork(action: str) -> None:
            writer = this()
            if writer is None:
                return
            if action == "before":
                writer._lock.acquire()
            elif action == "parent":
                writer._lock.release()
            else:
                writer._forked()

        os.register_at_fork(
            before=lambda: at_fork("before"),
            after_in_parent=lambda: at_fork("parent"),
            after_in_child=lambda: at_fork("child"),
        )

    def _open(self, worker: str) -> None:
        self.worker, self.path = worker, self.directory / f"{worker}.jsonl"
        self._file: files.Appended | files.Lost = (file := files.Appended(self.path))
        self._closer = weakref.finalize(self, file.close)
        if file.torn():
            self._write(b"\n")  # a predecessor killed mid-line: keep the first line here off its torn one
        # a predecessor's lines (a restarted xdist worker): its runner ids go on
        self._ids = itertools.count(self._next_id_number() if file.found else 1)

    def _forked(self) -> None:
        """In a forked child: a fresh lock (the parent's is held), ``<worker>.<pid>.jsonl`` and its ids."""
        self._lock = threading.Lock()
        detached = self._closer.detach()
        if not detached:  # closed before the fork
            return
        detached[1]()  # closes the child's copy of the parent's descriptor; the parent's stays open
        self._open(f"{self.worker.split('.')[0]}.{os.getpid()}")

    def _next_id_number(self) -> int:
        """A restarted xdist worker appends to its predecessor's file: keep runner ids unique."""
        from harness.ledger.reader import events  # only then: a new file has nothing to read back

        return 1 + sum(1 for r in events(self.path) if r.get("event") == "runner-start")

    def new_id(self) -> str:
        return f"{self.worker}-{next(self._ids)}"

    def write(self, event: str, *, sync: bool = True, **fields: Any) -> dict:
        """Write one event; returns it as written.

        The line is in the kernel's hands once written, kept through SIGKILL and ``os._exit``; ``sync`` also
        puts it on disk to survive a host crash. Runner events sync; per-test events, thousands per
        run, skip the fsync (one each doubled the wall of 2000 trivial tests).
        """
        # "event" first: readers may skip by it
        record = {"event": event, "t": time.time(), **self._redactor.data(fields)}
        line = (_ENCODER.encode(record) + "\n").encode()
        if event in NOTABLE:  # only ever set: the sampler's thread writes too
            self.notable = True
        with self._lock:
            self._write(line)
            if sync:
                try:
                    self._file.sync()
                except OSError as error:
                    self._lose(error)
        return record

    def test(
        self,
        nodeid: str,
        outcome: str,
        setup_s: float | None,
        call_s: float | None,
        teardown_s: float | None,
        following: str | None,
        failure_class: str | None = None,
        device_bytes: int | None = None,
    ) -> None:
        """The ``test`` event, which every test writes (unsynced): the same line ``write`` gives, formatted
        here, since the JSON encoder's set-up for each call was most of a trivial test's cost. Its time and
        the phases' durations (None for a phase that did not run) are kept to the millisecond: the shortest
        repr of the time alone cost a third of the line, and a phase under half a millisecond (most phases of
        most tests) is written as the ``0.000`` that formatting would give it, unformatted. The test a line
        announces is mostly the next line's own: its JSON is kept for it. A failed test carries its
        failure class (``harness.failures``); a test whose process has a device context, the most bytes torch
        held on its devices during it (``device_bytes``; absent without one: no device memory of its own).
        """
        known, quoted = self._announced
        clean = self._redactor.text  # a test id that carries a credential (a parameter) is written without it
        if nodeid is not known:
            quoted = _quoted(clean(nodeid))
        then = "null" if following is None else _quoted(clean(following))
        self._announced = (following, then)
        setup = "null" if setup_s is None else "0.000" if setup_s < 0.0005 else f"{setup_s:.3f}"
        call = "null" if call_s is None else "0.000" if call_s < 0.0005 else f"{call_s:.3f}"
        teardown = "null" if teardown_s is None else "0.000" if teardown_s < 0.0005 else f"{teardown_s:.3f}"
        why = "" if failure_class is None else f'"failure_class": {_quoted(failure_class)}, '
        if device_bytes is not None:
            why += f'"device_bytes": {int(device_bytes)}, '
        line = (
            f'{{"event": "test", "t": {time.time():.3f}, "nodeid": {quoted}, "outcome": "{outcome}", '
            f'"setup_s": {setup}, "call_s": {call}, "teardown_s": {teardown}, {why}"next": {then}}}\n'
        )
        self._write(line.encode())  # unlocked: see ``_write``

    def _write(self, data: bytes) -> None:
        """One line into the file, which keeps it whole against the sampler thread's lines; the lock around
        other events also keeps a fork from meeting one half done. A test's line comes from the thread that
        runs the tests, which is also the one that forks, and skips it: the lock cost as much as the
        line, every test."""
        try:
            self._file.write(data)
        except OSError as error:
            self._lose(error)

    def _lose(self, error: OSError) -> None:
        """The file refused a line (a full disk): said once, in one line, and nothing more is written."""
        if isinstance(self._file, files.Lost):
            return
        self._file = files.Lost()  # the descriptor stays open until ``close``, which the finalizer holds
        print(
            f"harness: error: cannot write the ledger {self.path} ({error.strerror or error}); "
            "this process records nothing more, its report lacks what follows",
            file=sys.stderr,
            flush=True,
        )

    def alone_and_quiet(self) -> bool:
        """Whether this writer wrote no NOTABLE event and its file is its directory's only one (no forked
        or spawned child, no xdist controller wrote beside it): then the directory holds nothing to
        account for, told without reading it."""
        # its files only: the footprints' folder beside them (harness.select.table) is no event
        return not self.notable and [n for n in os.listdir(self.directory) if n.endswith(".jsonl")] == [
            self.path.name
        ]

    def close(self) -> None:
        self._closer()
