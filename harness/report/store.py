"""Report files on disk: written atomically; and the one loader of every file the harness reads back.

A run's or a shard's ``report.json``, a baseline, the durations a split weighs (a report.json, a JUnit file,
pytest-split's ``.test_durations``) and the history in a report, ``phases.json`` and the
``HARNESS_CONFIGURATIONS`` file are all read here, one way: a regular file only (a FIFO is refused without
blocking, ``/dev/zero`` without reading it), at most ``MAX_BYTES``, JSON nested at most ``MAX_DEPTH`` deep
with finite numbers of at most 19 digits, then every field checked against its type in
``harness.report.schema`` (types, signs and ranges from the hints, ``harness.config.validate.mismatch``).
A flaw is one ``ReportError`` line naming the file and the field; what passes cannot crash later code.
"""

from __future__ import annotations

import copy
import errno
import json
import math
import os
import stat
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from harness import quarantine
from harness.config.validate import mismatch
from harness.errors import ConfigError, InfrastructureError, ReportError
from harness.ledger.check import LONGEST
from harness.ledger.records import seconds as test_seconds
from harness.report.schema import (
    ABSENT,
    VERSION,
    Configurations,
    Durations,
    EngineGroups,
    FootprintBegun,
    FootprintChild,
    FootprintSession,
    GpuFreeList,
    PhasesFile,
    Report,
    SelectionFile,
    SkippedList,
)
from harness.select.table import FOLDER

MAX_BYTES = 256 * 2**20  # a report or phases file larger than this is not one the harness wrote
MAX_DEPTH = 32  # JSON nesting: a report's deepest field (a runner's config) is far shallower


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
    """A report from a ``report.json`` or a run directory, every field checked (see the module); the fields
    version 1's first reports lacked are filled (``schema.ABSENT``)."""
    path = _in_directory(Path(path))
    return _report(path, json_object(path, "report"))


def _in_directory(path: Path) -> Path:
    if path.is_dir():
        if not (path / "report.json").is_file():
            raise ReportError(f"{path} is a directory without report.json (run 'harness report {path}')")
        return path / "report.json"
    return path


def _report(path: Path, report: dict) -> Report:
    if "version" not in report:
        raise ReportError(f"{path}: no 'version' field, not a harness report")
    if report["version"] != VERSION or type(report["version"]) is not int:
        raise ReportError(
            f"{path}: report format version {_shown(report['version'])}, this harness reads {VERSION}"
        )
    report = {**copy.deepcopy(ABSENT), **report}
    problem = mismatch(report, Report)
    if problem is not None:
        where, what, found = problem
        if "." not in where and "[" not in where and where not in report:
            raise ReportError(f"{path}: report has no '{where}' field")
        if what.endswith("(the field is missing)"):
            raise ReportError(f"{path}: report field {where} is missing")
        raise ReportError(f"{path}: report field {where}: expected {what}, got {_shown(found)}")
    return cast(Report, report)


def load_phases(path: Path) -> PhasesFile:
    """``phases.json`` (``harness run``'s account of a run), checked as the report is."""
    return cast(PhasesFile, checked(path, json_object(path, "phases file"), PhasesFile, "phases file"))


def configurations(path: str | Path) -> Configurations:
    """The ``HARNESS_CONFIGURATIONS`` file ``harness run`` wrote: node id -> fingerprint."""
    path = Path(path)
    return cast(
        Configurations,
        checked(path, json_object(path, "configurations"), Configurations, "configurations file"),
    )


def gpu_free_list(path: str | Path) -> GpuFreeList:
    """``gpu-free.json``, the list ``harness run`` hands a phase (``HARNESS_GPU_FREE_TESTS``)."""
    path = Path(path)
    return cast(GpuFreeList, checked(path, json_object(path, "GPU-free list"), GpuFreeList, "GPU-free list"))


def selection_file(path: str | Path) -> SelectionFile:
    """One of the run's one collection's files (``harness.run.selection``, read and added to by the
    collection's plugins ``harness.pytest_plugin.membership`` and ``harness.run.probe``)."""
    path = Path(path)
    found = json_object(path, "selection file")
    return cast(SelectionFile, checked(path, found, SelectionFile, "selection file"))


def engine_groups(path: str | Path) -> EngineGroups:
    """``engine-groups.json``, the history's package groups ``harness run`` hands a phase's order."""
    path = Path(path)
    return cast(
        EngineGroups, checked(path, json_object(path, "engine groups"), EngineGroups, "engine groups")
    )


def skipped_list(path: str | Path) -> SkippedList:
    """``selection-skipped.json``, the tests a run's selection leaves out, as ``harness run`` wrote it."""
    path = Path(path)
    return cast(
        SkippedList, checked(path, json_object(path, "selection list"), SkippedList, "selection list")
    )


Footprint = FootprintSession | FootprintChild | FootprintBegun
FOOTPRINT_KINDS = {"child": FootprintChild, "begun": FootprintBegun}  # by the file name's first word


def footprint_files(
    directories: Iterable[Path], since: float | None = None
) -> list[tuple[str, Footprint | None]]:
    """The footprint files of a run's sessions (``<ledger dir>/footprints/*.json``), each read and checked
    as every file is: (file name, content), ``child-*`` ones of the child's shape. Files older than
    ``since`` (the run's start) are an earlier run's in a reused directory. A file that cannot be read or
    is malformed is said in one line on stderr and given as (name, None): what it would have added is
    unknown, and the join decides what that costs."""
    found: list[tuple[str, Footprint | None]] = []
    for directory in directories:
        folder = Path(directory) / FOLDER
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                if since is not None and path.stat().st_mtime < since:
                    continue
                kind = FOOTPRINT_KINDS.get(path.name.split("-", 1)[0], FootprintSession)
                found.append(
                    (path.name, checked(path, json_object(path, "footprint"), kind, "footprint file"))
                )
            except (OSError, ReportError) as error:
                print(f"harness: footprint left out: {error}", file=sys.stderr)
                found.append((path.name, None))
    return found


def quarantine_list(path: str | Path) -> list[quarantine.Entry]:
    """vLLM's ``quarantined_tests.json``, read as every other file is, its entries checked by
    ``harness.quarantine``."""
    document = json_object(Path(path), "quarantine list")
    try:
        return quarantine.from_vllm(document, str(path))
    except ConfigError as error:
        raise ReportError(str(error)) from None


def checked(path: Path, value: Any, kind: Any, what: str) -> Any:
    """``value`` if it is of ``kind``, else one ``ReportError`` naming ``path``, the field and the problem."""
    problem = mismatch(value, kind)
    if problem is not None:
        where, expected, found = problem
        field = f" field {where}" if where else ""
        raise ReportError(f"{path}: {what}{field}: expected {expected}, got {_shown(found)}")
    return value


def recorded(path: str | Path) -> tuple[dict[str, float], str, Report | None]:
    """Seconds per test from what CI keeps, what it was, and (from a report.json) the report itself:
    a report.json or the run directory holding one, a JUnit XML file (keyed ``classname::name``, as
    ``harness.split.junit_key`` makes them), or pytest-split's ``.test_durations`` (node id → seconds).
    One read; a file that is none of them, or one of them with a bad field, is one ``ReportError`` line."""
    where = Path(path)
    if where.is_dir():
        where = _in_directory(where)
    text = _text(where, "durations")
    if text.lstrip().startswith("<"):
        return _junit(where, text), "junit", None
    data = _parsed(where, text, "durations")
    if isinstance(data, dict) and "version" in data:
        report = _report(where, data)
        seconds = {t["nodeid"]: test_seconds(t) for t in report["tests"]}
        return seconds, "report", report
    durations = checked(
        where, data, Durations, "durations file (a report.json, JUnit XML or pytest-split's .test_durations)"
    )
    return {str(k): float(v) for k, v in durations.items()}, "test_durations", None


def _junit(path: Path, text: str) -> dict[str, float]:
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise ReportError(f"{path}: not well-formed JUnit XML ({error})") from None
    found: dict[str, float] = {}
    for case in root.iter("testcase"):
        given = case.get("time") or "0"
        key = f"{case.get('classname', '')}::{case.get('name', '')}"
        try:
            seconds = float(given)
        except ValueError:
            seconds = math.nan
        if not 0 <= seconds <= LONGEST:  # NaN fails both
            raise ReportError(
                f"{path}: testcase {key[:100]!r} time {given[:40]!r}: expected seconds from 0 to {LONGEST:g}"
            )
        found[key] = seconds
    return found


def _shown(value: Any) -> str:
    """A value as an error line quotes it: its start only, a container by its kind."""
    return type(value).__name__ if isinstance(value, dict | list) else repr(value)[:60]


def json_object(path: Path, what: str) -> dict:
    """A JSON object from ``path``, telling missing, empty, truncated, non-JSON and non-object apart.

    Read bounded: not a regular file (a FIFO, ``/dev/zero``, a directory), over ``MAX_BYTES``, nested past
    ``MAX_DEPTH``, or holding NaN/Infinity (not JSON, and no comparison holds for them) is one
    ``ReportError`` line.
    """
    data = _parsed(path, _text(path, what), what)
    if not isinstance(data, dict):
        raise ReportError(f"{path}: not a {what} (JSON {type(data).__name__}, expected an object)")
    return data


def _parsed(path: Path, text: str, what: str) -> Any:
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
    flaw = _flaw(data, MAX_DEPTH)
    if flaw is not None:
        raise ReportError(f"{path}: not a {what} ({flaw})")
    return data


def _flaw(data: Any, most: int) -> str | None:
    """What no file of the harness holds: containers nested more than ``most`` deep, or text with a lone
    surrogate (JSON can escape one, UTF-8 cannot hold it: no summary could be written). Iterative, so no
    depth can overflow it."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and not _encodable(value):
                return f"text {value[:40]!r} holds a lone surrogate, not a character"
        elif isinstance(value, dict | list):
            if depth > most:
                return f"JSON nested more than {most} deep"
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack += [(item, depth + 1) for item in items if isinstance(item, str | dict | list)]
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _text(path: Path, what: str) -> str:
    """The file's text, read only if it is a regular file (opened non-blocking, so a FIFO without a
    writer is refused at once) and at most ``MAX_BYTES`` of it."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ReportError(f"{path}: no such {what} file") from None
    except OSError as error:
        raise ReportError(f"{path}: cannot read {what}: {error.strerror}") from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        if stat.S_ISDIR(mode):
            raise ReportError(f"{path}: is a directory, not a {what} file")
        raise ReportError(f"{path}: not a regular file, cannot be a {what}")
    with open(descriptor, "rb") as file:
        try:
            data = file.read(MAX_BYTES + 1)
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
