"""The crash-safe runner ledger: each process appends its events, a reader merges them into records."""

from harness.ledger.reader import Ledger, ended, events, quiet, read, started, unfinished
from harness.ledger.writer import LedgerWriter

__all__ = ["Ledger", "LedgerWriter", "ended", "events", "quiet", "read", "started", "unfinished"]
