"""A pytest plugin for benchmarks/session_phases.py: the harness with its ``test`` lines kept in memory and
written at the session's end, each line formatted as always. Run beside the plain harness
(``'cpu-nowrite=cpu -p no_test_write'``), it shows what the per-test system call costs a session's wall,
beyond the call's own microseconds (a guest kernel's syscall can cool the caches the interpreter runs in).
Diagnostic only: a worker killed mid-session would lose these lines."""

from __future__ import annotations

import pytest

from harness.ledger.writer import LedgerWriter

_HELD: list[tuple[LedgerWriter, bytes]] = []
_write = LedgerWriter._write


def _held(self: LedgerWriter, data: bytes) -> None:
    if data.startswith(b'{"event": "test"'):
        _HELD.append((self, data))
    else:
        _write(self, data)


LedgerWriter._write = _held  # type: ignore[method-assign]


@pytest.hookimpl(tryfirst=True)  # before the harness closes its writer
def pytest_unconfigure() -> None:
    for writer, data in _HELD:
        if writer._closer.alive:
            _write(writer, data)
    _HELD.clear()
