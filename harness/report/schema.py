"""report.json's format: its version and the fields every reader may rely on (docs/report-format.md)."""

from __future__ import annotations

VERSION = 1

# Fields ``load`` insists on; ``compare`` and ``shards`` read nothing else without a default.
REQUIRED = {
    "suite": (str, type(None)),
    "phases": list,
    "tests": list,
    "records": list,
    "starts": dict,
    "files": dict,
}
