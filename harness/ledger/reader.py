"""Reading a ledger directory back: every worker's events merged into one record per runner."""

from __future__ import annotations

import json
import math
import os
import signal
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from harness import failures
from harness.errors import HarnessError
from harness.ledger import files
from harness.ledger.check import problem
from harness.ledger.notable import NOTABLE

if TYPE_CHECKING:  # the shapes are for type checkers here: a session that only writes never defines them
    from harness.ledger.records import Finding, Record, Sample, TestResult, WorkerInfo

MAX_FILE_BYTES = 256 * 2**20  # a ledger file larger than this is not one the harness wrote


def started(records: list[Record]) -> list[Record]:
    """The records of runners that did start (a blocked or failed start is counted apart)."""
    return [r for r in records if r["outcome"] in ("started", "never-stopped")]


def refused_because(refusals: list[dict]) -> list[tuple[str, int]]:
    """Reuse refusals counted by kind of reason (a reason's words before its particulars: ``(...)``,
    ``: ...``), the most frequent first."""
    kinds = Counter(str(r.get("reason") or "no reason").split(" (")[0].split(": ")[0] for r in refusals)
    return sorted(kinds.items(), key=lambda item: (-item[1], item[0]))


@dataclass
class Ledger:
    """The merged view of a ledger directory (all workers, all phases below it)."""

    records: list[Record] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    tests: list[TestResult] = field(default_factory=list)
    workers: list[WorkerInfo] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    collected: dict[str, None] = field(default_factory=dict)  # node ids collected, in order (a set)
    reuses: list[dict[str, Any]] = field(default_factory=list)  # ``runner-reused``: a warm engine handed on
    refusals: list[dict[str, Any]] = field(default_factory=list)  # ``reuse-refused``: not handed on, and why
    shards: list[dict[str, Any]] = field(default_factory=list)  # ``shard``: a --num-shards split's choice
    reruns: list[dict[str, Any]] = field(default_factory=list)  # ``rerun``: a try of a test run again


def events(path: Path, bad: list[Finding] | None = None) -> Iterator[dict[str, Any]]:
    """The events of one file. A line that is not JSON (a write torn by a kill, bytes that are not UTF-8)
    is skipped; one that is JSON but not an event the harness writes (a field of the wrong type or out of
    range, a required one missing) is skipped with a ``bad-ledger-line`` finding added to ``bad``. A
    symlink or an oversized file is refused in one line."""
    for number, line in enumerate(_contents(path).splitlines(), 1):
        try:
            event = json.loads(line, parse_constant=_no_number, parse_float=_finite)
            wrong = problem(event)
        except _NotFinite as constant:
            event, wrong = None, f"a number that is {constant}, not finite"
        except (ValueError, RecursionError):  # torn, not UTF-8, or nested past the parser's depth
            continue
        if wrong is None:
            yield event
        elif bad is not None:
            message = f"{path.name} line {number} skipped: {wrong}"
            bad.append({"type": "bad-ledger-line", "message": message})


def _contents(path: Path) -> bytes:
    """One ledger file's lines (none when it is missing); a symlink or an oversized file is refused."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return b""
    except OSError as error:
        raise HarnessError(
            f"{path}: cannot read ledger file ({error.strerror}; symlinks are refused)"
        ) from None
    with open(descriptor, "rb") as file:
        data = file.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise HarnessError(
            f"{path}: ledger file larger than {MAX_FILE_BYTES >> 20} MiB, not one the harness wrote"
        )
    return data


def _line_start(event: str) -> bytes:
    """How the writer begins a line of ``event``: the name first, JSON's default separators."""
    return b'{"event": ' + json.dumps(event).encode()


def quiet(directory: str | os.PathLike) -> bool:
    """Whether no file below ``directory`` holds a runner start, a finding or a crash: then a session has
    nothing to account for (a test its process died in is a ``crash`` the xdist controller writes; in a
    serial session the process itself is alive to ask). Told from the bytes without parsing a line, so the
    summary of thousands of trivial tests does not read them all back; a line in another spelling than the
    writer's goes unseen here only, never in ``read``."""
    markers = [_line_start(name) for name in NOTABLE]
    for path in sorted(Path(directory).rglob("*.jsonl")):
        data = _contents(path)
        if any(marker in data for marker in markers):
            return False
    return True


def running_test(path: Path) -> tuple[str, str] | None:
    """(node id, file) of the test the process writing ``path`` is running now: the last one started (or
    announced) with no ``test`` event after it; None between tests."""
    tests = _tests_of(list(events(path)), {})
    running = tests[-1] if tests and tests[-1].get("crash") else None
    return None if running is None else (running["nodeid"], running["file"])


def live_runners(directory: Path, worker: str, own: Path) -> list[tuple[Path, Record]]:
    """The runners started and not stopped, in this session, by the other live processes of ``worker``'s
    family: the worker itself (``<worker>.jsonl``) and the processes its tests spawned
    (``<worker>.<pid>.jsonl``), each with its file. ``own`` (the caller's file) is left out."""
    family = worker.split(".")[0]
    found: list[tuple[Path, Record]] = []
    for path in [directory / f"{family}.jsonl", *sorted(directory.glob(f"{family}.*.jsonl"))]:
        if path == own or not files.in_use(path):
            continue
        listed = list(events(path))
        starts = [i for i, e in enumerate(listed) if e["event"] == "worker"]  # a restarted worker's file
        merged = Ledger()
        _merge(listed[starts[-1] if starts else 0 :], merged)
        found += [(path, r) for r in merged.records if r["outcome"] == "never-stopped" and r["startup_s"]]
    return found


class _NotFinite(ValueError):
    """NaN or an infinite number in a line: ``json.dumps`` writes them, JSON has none, and no comparison
    holds for them, so none may reach the report."""


def _no_number(name: str) -> None:
    raise _NotFinite(name)


def _finite(text: str) -> float:
    value = float(text)  # 1e400 reads as inf
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def ended(returncode: int | None) -> str:
    """How a process ended, from its exit status as the shell writes it (128 + n: killed by signal n)."""
    if returncode is None:
        return "its process ended"
    if returncode < 0 or returncode > 128:
        number = -returncode if returncode < 0 else returncode - 128
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    return f"exited with status {returncode}"


def crashed_test(start: dict, crash: dict | None, worker: dict | None, fired: bool = False) -> dict:
    """The ``test`` event of a test whose process died under it: an ``error`` saying how it died, or for a
    quarantined test (its ``crash`` event says so) what its own failure would be, pytest's xfail:
    ``skipped`` with its class, which gates nothing in any output; ``fired``: pytest-timeout's thread-method
    timer fired in it first (its ``timeout`` finding, written before the timer ends the process), the one
    evidence of a timeout (how long it ran is none)."""
    how = crash["how"] if crash else "its process ended"
    hint = " (pytest-timeout's thread method ended it)" if fired else ""
    quarantined = bool(crash and crash.get("quarantined"))
    hint += " (quarantined: it does not gate)" if quarantined else ""
    who = start.get("worker") or (worker or {}).get("worker") or "main"
    return {
        "event": "test",
        "t": crash["t"] if crash else start["t"],
        "nodeid": start["nodeid"],
        "file": start.get("file") or start["nodeid"].partition("::")[0],
        "outcome": "skipped" if quarantined else "error",
        "setup_s": None,
        "call_s": None,
        "teardown_s": None,
        "worker": who,
        "phase": start.get("phase"),
        "crash": f"worker {who} {how} while running {start['nodeid']}{hint}",
        # its process's exit is the evidence: pytest-timeout's thread method's, or another death
        "failure_class": failures.classify(failures.Evidence(crashed=True, timed_out=fired)),
    }


def _tests_of(file_events: list[dict], crashes: dict[str, dict]) -> list[dict]:
    """The ``test`` events of one file plus a crashed test for every test started and left without one.

    A test starts with its ``test-start``, or with the ``next`` of the test event before it (the writer
    announces the test pytest runs next instead of writing its start). An announced test that another
    test follows instead (xdist stole it), or that the ``session-end`` names as ``not_started`` (``-x``, an
    interrupt between tests), did not run here.
    """
    tests: list[dict] = []
    pending, worker = None, None
    fired = {e.get("test") for e in file_events if e["event"] == "finding" and e.get("type") == "timeout"}

    def close() -> None:
        if pending is not None:
            died = pending["nodeid"]
            tests.append(crashed_test(pending, crashes.get(died), worker, died in fired))

    for event in file_events:
        kind = event["event"]
        if kind in ("test-start", "test"):
            _session_fields(event, worker)
            if pending is not None and pending.get("announced") and pending["nodeid"] != event["nodeid"]:
                pending = None
        if kind == "test-start":
            close()
            pending = event
        elif kind == "test":
            if pending is not None and event["nodeid"] == pending["nodeid"]:
                pending = None
            following = event.pop("next", None)
            tests.append(event)
            if isinstance(following, str):
                pending = {"event": "test-start", "t": event["t"], "nodeid": following, "announced": True}
                _session_fields(pending, worker)
        elif kind == "session-end" and pending is not None and pending["nodeid"] == event.get("not_started"):
            pending = None
        elif kind == "worker":
            close()
            pending, worker = None, event
    close()
    return tests


def _session_fields(event: dict, worker: dict | None) -> None:
    """A test's fields that its session's ``worker`` event holds once (older ledgers wrote them each time):
    the worker, the phase, and the device, the first the process sees."""
    worker = worker or {}
    if event.get("file") is None:  # a line may say null: a test's file is its node id's, always
        event["file"] = event["nodeid"].partition("::")[0]
    event.setdefault("worker", worker.get("worker"))
    event.setdefault("phase", worker.get("phase"))
    devices = worker.get("devices")
    event.setdefault("device", devices[0] if isinstance(devices, list) and devices else None)


def _load(
    directory: str | os.PathLike, bad: list[Finding] | None = None
) -> tuple[dict[Path, list[dict]], dict[str, dict]]:
    """Every file's events, and the ``crash`` events by the test they name; bad lines' findings to ``bad``."""
    per_path = {path: list(events(path, bad)) for path in sorted(Path(directory).rglob("*.jsonl"))}
    crashes = {e["test"]: e for listed in per_path.values() for e in listed if e["event"] == "crash"}
    return per_path, crashes


def unfinished(directory: str | os.PathLike) -> list[str]:
    """Tests a process started and never finished, that no ``crash`` event explains yet."""
    per_path, crashes = _load(directory)
    return [
        test["nodeid"]
        for listed in per_path.values()
        for test in _tests_of(listed, {})
        if test.get("crash") and test["nodeid"] not in crashes
    ]


def read(directory: str | os.PathLike) -> Ledger:
    """Merge every ``*.jsonl`` below ``directory`` into records, findings, tests, workers, samples and
    reuse events."""
    ledger = Ledger()
    per_path, crashes = _load(directory, ledger.findings)
    for listed in per_path.values():
        ledger.tests += [cast("TestResult", _without_kind(t)) for t in _tests_of(listed, crashes)]
        _merge(listed, ledger)
    for test in ledger.tests:  # a failure no plugin classed (pytest's own, an older ledger's): one class
        if test["outcome"] in ("failed", "error") and test.get("failure_class") is None:
            test["failure_class"] = failures.OTHER  # type: ignore[typeddict-item]
    ledger.findings += [
        {"type": "crash", "t": t["t"], "test": t["nodeid"], "phase": t.get("phase"), "message": t["crash"]}
        for t in ledger.tests
        if t.get("crash")
    ]
    ledger.findings += [_never_stopped(r) for r in ledger.records if r["outcome"] == "never-stopped"]
    return ledger


def _without_kind(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k != "event"}


# The events that are kept as they are, and where each goes (``test`` events go through ``_tests_of``).
_AS_IS = {
    "finding": "findings",
    "worker": "workers",
    "memory": "samples",
    "runner-reused": "reuses",
    "reuse-refused": "refusals",
    "shard": "shards",
    "rerun": "reruns",
}


def _merge(file_events: list[dict[str, Any]], ledger: Ledger) -> None:
    """One worker file's events into ``ledger``; ids are per file (phases reuse worker names)."""
    by_id: dict[str, Record] = {}
    for event in map(dict, file_events):
        kind = event.pop("event")
        if kind == "runner-start":
            by_id[event["id"]] = _record(event)
            ledger.records.append(by_id[event["id"]])
        elif kind in _ENDS and event.get("id") in by_id:
            by_id[event["id"]].update(_ENDS[kind](event))  # type: ignore[typeddict-item]
        elif kind in _AS_IS:
            getattr(ledger, _AS_IS[kind]).append(event)
        elif kind == "collected":
            ledger.collected.update(dict.fromkeys(event["tests"]))


def _record(start: dict[str, Any]) -> Record:
    """A runner's record from its ``runner-start`` event, not stopped (yet)."""
    fields = {k: v for k, v in start.items() if k != "t"}
    return cast(
        "Record",
        {
            **_UNOWNED,
            **fields,
            "start": start["t"],
            "startup_s": None,
            "stop": None,
            "teardown_s": None,
            "mem_after_start": None,
            "held_after_start": None,
            "mem_after_stop": None,
            "outcome": "never-stopped",
            "error": None,
            "holders": [],
        },
    )


# A runner start's optional fields, as a record holds them when its line left them out.
_UNOWNED: dict[str, Any] = {
    "fingerprint": None,
    "config": None,
    "test": None,
    "file": None,
    "fixture": None,
    "scope": None,
    "worker": None,
    "phase": None,
    "devices": [],
    "need_bytes": None,
    "mem_before": None,
}

# What each later event of a runner changes in its record.
_ENDS = {
    "runner-started": lambda e: {
        "startup_s": e.get("startup_s"),
        "mem_after_start": e.get("mem_after_start"),
        "held_after_start": e.get("held_after_start"),
        **({"compile": e.get("compile")} if "compile" in e else {}),
    },
    "runner-failed": lambda e: {
        "startup_s": e.get("startup_s"),
        "outcome": "blocked" if e.get("blocked") else "failed",
        "error": e.get("error"),
        "holders": e.get("holders", []),
    },
    "runner-stopped": lambda e: {
        "stop": e["t"],
        "teardown_s": e.get("teardown_s"),
        "mem_after_stop": e.get("mem_after_stop"),
        "outcome": "started",
    },
}


def _never_stopped(record: Record) -> Finding:
    return {
        "type": "never-stopped",
        "t": record["start"],
        "runner": record["id"],
        "test": record.get("test"),
        "message": f"{record['kind']} runner {record['model']} started in {record.get('test')} "
        f"was never stopped (worker {record.get('worker')} ended or was killed)",
    }
