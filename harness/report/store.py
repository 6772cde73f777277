"""Report files on disk: written atomically, read back with every flaw named in one line."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import cast

from harness.errors import ReportError
from harness.report.schema import REQUIRED, VERSION, Report


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file in the same directory and ``os.replace``: a kill leaves old or new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide CI artifacts from other users
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load(path: str | Path) -> Report:
    """A report from a ``report.json`` or a run directory; any flaw is one ``ReportError`` line."""
    path = Path(path)
    if path.is_dir():
        if not (path / "report.json").is_file():
            raise ReportError(f"{path} is a directory without report.json (run 'harness report {path}')")
        path = path / "report.json"
    report = json_object(path, "report")
    if "version" not in report:
        raise ReportError(f"{path}: no 'version' field, not a harness report")
    if report["version"] != VERSION:
        raise ReportError(
            f"{path}: report format version {report['version']!r}, this harness reads {VERSION}"
        )
    for field, kind in REQUIRED.items():
        if field not in report:
            raise ReportError(f"{path}: report has no '{field}' field")
        if not isinstance(report[field], kind):
            raise ReportError(f"{path}: report field '{field}' has the wrong type")
    if not all(isinstance(phase, dict) and isinstance(phase.get("name"), str) for phase in report["phases"]):
        raise ReportError(f"{path}: a phase in the report has no name")
    return cast(Report, report)


def json_object(path: Path, what: str) -> dict:
    """A JSON object from ``path``, telling missing, empty, truncated, non-JSON and non-object apart."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportError(f"{path}: no such {what} file") from None
    except UnicodeDecodeError:
        raise ReportError(f"{path}: not a JSON {what} (not UTF-8 text)") from None
    except OSError as error:
        raise ReportError(f"{path}: cannot read {what}: {error.strerror}") from None
    if not text.strip():
        raise ReportError(f"{path}: empty {what} file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        if error.pos >= len(text.rstrip()) or error.msg.startswith("Unterminated string"):
            size = len(text.encode("utf-8"))
            raise ReportError(f"{path}: truncated {what} (JSON ends early, after {size} bytes)") from None
        raise ReportError(
            f"{path}: not a JSON {what} ({error.msg} at line {error.lineno} column {error.colno})"
        ) from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: not a {what} (JSON {type(data).__name__}, expected an object)")
    return data
