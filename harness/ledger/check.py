"""The type and range of every ledger field the reader and the report read: a line that breaks one is not
one the harness wrote (a hand edit, a foreign or hostile writer), and is skipped with one finding naming
it, so that nothing past the reader meets a value of the wrong kind.

A field may be missing unless it is required; ``None`` is allowed where the writer writes it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from harness.failures import CLASSES

LATEST = 1e10  # seconds since the epoch: past the year 2286, no clock's
LONGEST = 1e7  # seconds: a duration of months is not one a test or a runner took
MOST_BYTES = 2**63  # a device's or a host's memory in bytes fits a signed 64-bit integer
OUTCOMES = ("passed", "failed", "skipped", "error")
KINDS = ("vllm", "hf")  # what runs a runner-start or runner-reused names

Check = Callable[[Any], bool]


def _number(value: Any, low: float, high: float) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and low <= value <= high


def time(value: Any) -> bool:
    return _number(value, 0, LATEST) and math.isfinite(value)


def seconds(value: Any) -> bool:
    return _number(value, 0, LONGEST) and math.isfinite(value)


def text(value: Any) -> bool:
    return isinstance(value, str)


def texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def count(value: Any) -> bool:
    return type(value) is int and 0 <= value < MOST_BYTES


def flag(value: Any) -> bool:
    return isinstance(value, bool)


def table(value: Any) -> bool:
    return isinstance(value, dict)


def byte_counts(value: Any) -> bool:
    """Bytes by device: ``{"GPU-…": 123}``."""
    return isinstance(value, dict) and all(isinstance(k, str) and count(v) for k, v in value.items())


def outcome(value: Any) -> bool:
    return value in OUTCOMES


def share(value: Any) -> bool:
    """A declared share of a device: above 0, at most 1."""
    return _number(value, 0, 1) and value > 0


def kind(value: Any) -> bool:
    return value in KINDS


def failure_class(value: Any) -> bool:
    return value in CLASSES


def compile_state(value: Any) -> bool:
    return value in (None, "warm", "cold")


WHAT: dict[Check, str] = {
    time: "a time since the epoch",
    seconds: f"a duration of 0 to {LONGEST:g} s",
    text: "a string",
    texts: "a list of strings",
    count: "a count of 0 or more",
    flag: "true or false",
    table: "an object",
    byte_counts: "bytes by device",
    outcome: "an outcome (" + ", ".join(OUTCOMES) + ")",
    kind: "a runner kind (" + ", ".join(KINDS) + ")",
    failure_class: "a failure class (" + ", ".join(CLASSES) + ")",
    compile_state: "warm, cold or null",
    share: "a share of a device above 0, at most 1",
}

# (check, required, nullable) per field, per event; ``t`` and ``event`` are every event's
REQUIRED, OPTIONAL, NULLABLE = (True, False), (False, False), (False, True)
_OWNER = {name: (text, *NULLABLE) for name in ("test", "file", "fixture", "scope", "worker", "phase")}
FIELDS: dict[str, dict[str, tuple[Check, bool, bool]]] = {
    "runner-start": {
        "id": (text, *REQUIRED),
        "kind": (text, *REQUIRED),
        "model": (text, *REQUIRED),
        "fingerprint": (text, *NULLABLE),
        "config": (table, *NULLABLE),
        **_OWNER,
        "devices": (texts, *OPTIONAL),
        "need_bytes": (count, *NULLABLE),
        "fraction": (share, *NULLABLE),
        "mem_before": (byte_counts, *NULLABLE),
    },
    "runner-started": {
        "id": (text, *REQUIRED),
        "startup_s": (seconds, *NULLABLE),
        "mem_after_start": (byte_counts, *NULLABLE),
        "held_after_start": (byte_counts, *NULLABLE),
        "compile": (compile_state, *OPTIONAL),  # a vLLM start: its compile caches warm or cold (or null)
    },
    "runner-failed": {
        "id": (text, *REQUIRED),
        "startup_s": (seconds, *NULLABLE),
        "error": (text, *NULLABLE),
        "blocked": (flag, *NULLABLE),
        "holders": (texts, *OPTIONAL),
    },
    "runner-stopped": {
        "id": (text, *REQUIRED),
        "teardown_s": (seconds, *NULLABLE),
        "mem_after_stop": (byte_counts, *NULLABLE),
    },
    "test": {
        "nodeid": (text, *REQUIRED),
        "outcome": (outcome, *REQUIRED),
        "setup_s": (seconds, *NULLABLE),
        "call_s": (seconds, *NULLABLE),
        "teardown_s": (seconds, *NULLABLE),
        "next": (text, *NULLABLE),
        "file": (text, *NULLABLE),
        "worker": (text, *NULLABLE),
        "phase": (text, *NULLABLE),
        "device": (text, *NULLABLE),
        "failure_class": (failure_class, *OPTIONAL),
        "device_bytes": (count, *OPTIONAL),  # torch's peak on its devices, where its process had a context
    },
    "test-start": {"nodeid": (text, *REQUIRED), "worker": (text, *NULLABLE), "phase": (text, *NULLABLE)},
    "crash": {
        "test": (text, *REQUIRED),
        "how": (text, *REQUIRED),
        "worker": (text, *NULLABLE),
        "quarantined": (flag, *OPTIONAL),  # the test is quarantined: its crash is reported, never gates
    },
    "finding": {
        "type": (text, *REQUIRED),
        "message": (text, *REQUIRED),
        "runner": (text, *NULLABLE),
        "test": (text, *NULLABLE),
        "phase": (text, *NULLABLE),
        "worker": (text, *NULLABLE),
        "tests": (texts, *OPTIONAL),
    },
    "worker": {
        "worker": (text, *REQUIRED),
        "devices": (texts, *OPTIONAL),
        "mask": (text, *NULLABLE),
        "pid": (count, *NULLABLE),
        "phase": (text, *NULLABLE),
        "timeout": (seconds, *NULLABLE),
        "timeout_method": (text, *NULLABLE),
    },
    "memory": {"used": (byte_counts, *REQUIRED)},
    "collected": {"tests": (texts, *REQUIRED)},
    "session-end": {"not_started": (text, *NULLABLE)},
    "runner-reused": {
        "runner": (text, *NULLABLE),
        "kind": (kind, *REQUIRED),
        "model": (text, *NULLABLE),
        "fingerprint": (text, *NULLABLE),
        **_OWNER,
        "saved_s": (seconds, *NULLABLE),
        "handoff_s": (seconds, *OPTIONAL),
    },
    "shard": {
        "index": (count, *REQUIRED),
        "count": (count, *REQUIRED),
        "tests": (count, *REQUIRED),
        "predicted_s": (seconds, *REQUIRED),
        "source": (text, *REQUIRED),
        "phase": (text, *NULLABLE),
    },
    "reuse-refused": {
        "runner": (text, *NULLABLE),
        "fingerprint": (text, *NULLABLE),
        "model": (text, *NULLABLE),
        "test": (text, *NULLABLE),
        "reason": (text, *NULLABLE),
    },
    "rerun": {
        "test": (text, *REQUIRED),
        "attempt": (count, *REQUIRED),
        "outcome": (outcome, *REQUIRED),
        "when": (text, *NULLABLE),
        "message": (text, *NULLABLE),
        "longrepr": (text, *NULLABLE),
        "first_outcome": (outcome, *REQUIRED),
        "first_message": (text, *NULLABLE),
        "first_longrepr": (text, *NULLABLE),
        "failure_class": (failure_class, *NULLABLE),
        "first_failure_class": (failure_class, *NULLABLE),
        "why": (text, *REQUIRED),
        "policy": (text, *REQUIRED),
        "starts": (count, *REQUIRED),
        "started_s": (seconds, *REQUIRED),
        "reused": (count, *REQUIRED),
        "reused_s": (seconds, *REQUIRED),
        "result": (outcome, *REQUIRED),
        "counts": (count, *REQUIRED),
        "verdict": (text, *NULLABLE),
        "file": (text, *NULLABLE),
        "worker": (text, *NULLABLE),
        "phase": (text, *NULLABLE),
    },
}


def problem(event: Any) -> str | None:
    """What makes ``event`` (a parsed line) not one the harness writes, in a few words; None when it is."""
    if not isinstance(event, dict) or not isinstance(event.get("event"), str):
        return "not an object with an 'event' name"
    if not time(event.get("t")):
        return f"field 't' is {_shown(event.get('t'))}, not {WHAT[time]}"
    for name, (check, required, nullable) in FIELDS.get(event["event"], {}).items():
        if name not in event:
            if required:
                return f"{event['event']} event without its field '{name}'"
            continue
        value = event[name]
        if not (value is None and nullable) and not check(value):
            return f"field '{name}' of a {event['event']} event is {_shown(value)}, not {WHAT[check]}"
    return None


def _shown(value: Any) -> str:
    """A value as a finding quotes it: its type and its start, never a line's worth."""
    text_ = repr(value)
    return f"{type(value).__name__} {text_[:40]}{'…' if len(text_) > 40 else ''}"
