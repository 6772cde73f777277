"""Report files on disk: written atomically, read back with every flaw named in one line."""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import cast

from harness.errors import InfrastructureError, ReportError
from harness.report.schema import REQUIRED, VERSION, Report

MAX_BYTES = 256 * 2**20  # a report or phases file larger than this is not one the harness wrote


FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a full disk, a quota, a file size limit


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file in the same directory and ``os.replace``: a kill leaves old or new. A full
    disk is the machine's fault, said in one line (``InfrastructureError``): not bad input, no traceback."""
    try:
        _write_atomic(path, text)
    except OSError as error:
        if error.errno in FULL:
            raise InfrastructureError(f"{path}: cannot write it ({error.strerror})") from None
        raise


def _write_atomic(path: Path, text: str) -> None:
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
    problem = _misshapen(report)
    if problem:
        raise ReportError(f"{path}: report field {problem} has the wrong type")
    return cast(Report, report)


def _misshapen(report: dict) -> str | None:
    """The first nested field ``compare`` and sharding read that is not of its documented type."""
    for i, phase in enumerate(report["phases"]):
        if not _number(phase.get("wall_s"), none=True) or not _counts(phase.get("outcomes", {})):
            return f"phases[{i}]"
    for i, test in enumerate(report["tests"]):
        seconds = (test.get(k) for k in ("setup_s", "call_s", "teardown_s"))
        if not (isinstance(test, dict) and isinstance(test.get("file"), str)) or not all(
            _number(v, none=True) for v in seconds
        ):
            return f"tests[{i}]"
    for key in ("total", "by_phase", "by_file", "by_kind"):
        group = report["starts"].get(key, {})
        tallies = [group] if key == "total" else group.values() if isinstance(group, dict) else [None]
        if not all(isinstance(t, dict) and _counts(t.get("by_kind", {})) for t in tallies):
            return f"starts.{key}"
    for name, entry in report["files"].items():
        if not (isinstance(entry, dict) and _number(entry.get("wall_s"), none=True)):
            return f"files[{name!r}]"
        if not _counts(entry.get("outcomes", {})):
            return f"files[{name!r}]"
    return None


def _number(value, none: bool = False) -> bool:
    if value is None:
        return none
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _counts(value) -> bool:
    """A ``{name: count}`` table."""
    return isinstance(value, dict) and all(type(n) is int for n in value.values())


def json_object(path: Path, what: str) -> dict:
    """A JSON object from ``path``, telling missing, empty, truncated, non-JSON and non-object apart.

    Read bounded: not a regular file (``/dev/zero``), over ``MAX_BYTES``, nested past the parser's depth,
    or holding NaN/Infinity (not JSON, and no comparison holds for them) is one ``ReportError`` line.
    """
    text = _bounded_text(path, what)
    if not text.strip():
        raise ReportError(f"{path}: empty {what} file")
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_float=_finite, parse_int=_bounded_int)
    except json.JSONDecodeError as error:
        if error.pos >= len(text.rstrip()) or error.msg.startswith("Unterminated string"):
            size = len(text.encode("utf-8"))
            raise ReportError(f"{path}: truncated {what} (JSON ends early, after {size} bytes)") from None
        raise ReportError(
            f"{path}: not a JSON {what} ({error.msg} at line {error.lineno} column {error.colno})"
        ) from None
    except RecursionError:
        raise ReportError(f"{path}: not a {what} (JSON nested too deeply)") from None
    except ValueError as error:
        raise ReportError(f"{path}: not a {what} ({error})") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: not a {what} (JSON {type(data).__name__}, expected an object)")
    return data


def _bounded_text(path: Path, what: str) -> str:
    try:
        with open(path, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise ReportError(f"{path}: not a regular file, cannot be a {what}")
            data = file.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ReportError(f"{path}: no such {what} file") from None
    except IsADirectoryError:
        raise ReportError(f"{path}: is a directory, not a {what} file") from None
    except OSError as error:
        raise ReportError(f"{path}: cannot read {what}: {error.strerror}") from None
    if len(data) > MAX_BYTES:
        raise ReportError(f"{path}: larger than {MAX_BYTES >> 20} MiB, not a {what} the harness wrote")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ReportError(f"{path}: not a JSON {what} (not UTF-8 text)") from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


MOST_DIGITS = 19  # a signed 64-bit integer: bytes of memory, counts, times all fit


def _bounded_int(text: str) -> int:
    """An integer a report can hold; a 400-digit one (which no float holds) is one line, not an
    ``OverflowError`` where it is summed."""
    if len(text.lstrip("-")) > MOST_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits is past what a report holds")
    return int(text)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is past the largest number a report holds")
    return value
