"""The crash-safe runner ledger: each process appends its events, a reader merges them into records.

The reader's names load on first use (PEP 562): a session that only writes never imports the reader.
"""

from typing import TYPE_CHECKING

from harness.ledger.writer import LedgerWriter

if TYPE_CHECKING:
    from harness.ledger.reader import Ledger, ended, events, quiet, read, refused_because, started, unfinished

__all__ = [
    "Ledger",
    "LedgerWriter",
    "ended",
    "events",
    "quiet",
    "read",
    "refused_because",
    "started",
    "unfinished",
]


def __getattr__(name: str):
    if name in __all__:
        from harness.ledger import reader

        return getattr(reader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
