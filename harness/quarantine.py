"""Quarantine: tests whose failures are reported but do not fail the run.

Two sources, one shape: vLLM's ``quarantined_tests.json`` (its flaky detector's output: ``entries`` of
``test_id`` and ``backend``) and a plain list in ``[tool.harness] quarantine`` (a node id, or a table with
``test``, ``until``, ``platform``, ``reason``). One for another platform does not apply. Of this platform's
entries that cover a test, the latest listed decides (the settings' list first, then the file's): if it
holds today the test is quarantined, if it is past its ``until`` date the test gates again, whatever an
earlier entry said; so an entry and what the run does never disagree. An entry names a test as pytest
does, from the rootdir or from the directory vLLM's CI runs in (``models/test_x.py::test_y`` covers
``tests/models/test_x.py::test_y``), and without its parameters it covers each of them.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from harness.errors import ConfigError
from harness.platform import VLLM_BACKENDS

MAX_ENTRIES = 100_000  # a quarantine longer than this is not a list someone keeps
_KEYS = ("test", "until", "platform", "reason")


@dataclass(frozen=True)
class Entry:
    """One quarantined test: where it came from, until when (a date, inclusive), on which platform."""

    test: str
    source: str
    until: datetime.date | None = None
    platform: str | None = None  # a harness platform or vLLM's backend name; None: every platform
    reason: str = ""
    raw: Mapping[str, object] | None = field(default=None, compare=False, hash=False)  # vLLM's entry

    def on(self, platform: str) -> bool:
        """Whether it is for ``platform`` (by the harness's name or vLLM's backend name), or for every one."""
        return self.platform in (None, platform, VLLM_BACKENDS.get(platform))

    def holds(self, today: datetime.date) -> bool:
        """Whether its ``until`` (inclusive) has not passed."""
        return self.until is None or today <= self.until

    def covers(self, nodeid: str) -> bool:
        """The node id itself, its parametrisations, or either seen from a directory below the rootdir."""
        return any(
            candidate == self.test or candidate.startswith(self.test + "[") for candidate in _suffixes(nodeid)
        )


def _suffixes(nodeid: str) -> Iterable[str]:
    path, _, rest = nodeid.partition("::")
    parts = path.split("/")
    for start in range(len(parts)):
        yield "/".join(parts[start:]) + ("::" + rest if rest else "")


def from_settings(values: Iterable[object], where: str = "[tool.harness] quarantine") -> list[Entry]:
    """The plain list: node ids, or tables of test, until (YYYY-MM-DD), platform and reason."""
    entries = []
    for position, value in enumerate(values):
        label = f"{where}[{position}]"
        if isinstance(value, str) and value.strip():
            entries.append(Entry(value.strip(), where))
        elif isinstance(value, Mapping):
            entries.append(_table(label, value, where))
        else:
            raise ConfigError(f"{label}: expected a test's node id or a table with 'test', got {value!r}")
    return entries


def _table(label: str, value: Mapping[str, object], source: str) -> Entry:
    unknown = [key for key in value if key not in _KEYS]
    if unknown:
        raise ConfigError(f"{label} {unknown[0]!r}: unknown key (known: {', '.join(_KEYS)})")
    test, until, platform, reason = (value.get(key) for key in _KEYS)
    if not isinstance(test, str) or not test.strip():
        raise ConfigError(f"{label} test: expected a test's node id, got {test!r}")
    if platform is not None and platform not in (*VLLM_BACKENDS, *VLLM_BACKENDS.values(), "other"):
        raise ConfigError(f"{label} platform: expected one of {', '.join(VLLM_BACKENDS)}, got {platform!r}")
    if reason is not None and not isinstance(reason, str):
        raise ConfigError(f"{label} reason: expected a string, got {reason!r}")
    return Entry(test.strip(), source, _date(f"{label} until", until), platform, reason or "")


def _date(label: str, value: object) -> datetime.date | None:
    if value is None or (isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)):
        return value
    if isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            pass
    raise ConfigError(f"{label}: expected a date (YYYY-MM-DD), got {value!r}")


def from_vllm(document: object, source: str) -> list[Entry]:
    """vLLM's ``quarantined_tests.json``: ``{"entries": [{"test_id", "backend", "fail_rate", ...}]}``."""
    entries = document.get("entries") if isinstance(document, dict) else None
    if not isinstance(entries, list) or len(entries) > MAX_ENTRIES:
        raise ConfigError(
            f"{source}: expected vLLM's quarantine list ({{'entries': [...]}}), got another shape"
        )
    found = []
    for position, entry in enumerate(entries):
        label = f"{source} entries[{position}]"
        test = entry.get("test_id") if isinstance(entry, dict) else None
        backend = entry.get("backend") if isinstance(entry, dict) else None
        if not isinstance(test, str) or not test.strip():
            raise ConfigError(f"{label} test_id: expected a test's id, got {test!r}")
        if not isinstance(backend, str) or backend not in (*VLLM_BACKENDS.values(), "other"):
            raise ConfigError(
                f"{label} backend: expected one of cuda, rocm, intel, cpu, other, got {backend!r}"
            )
        reason = entry.get("reason")
        reason = reason if isinstance(reason, str) else ""
        found.append(Entry(test.strip(), source, None, backend, reason, entry))
    return found


def deciding(nodeid: str, entries: Sequence[Entry]) -> Entry | None:
    """The entry that decides for ``nodeid``: the latest listed of ``entries`` (one platform's) that covers
    it; None when none does."""
    return next((entry for entry in reversed(entries) if entry.covers(nodeid)), None)


@dataclass(frozen=True)
class Decided:
    """A suite's tests under a quarantine: those it holds (node id -> its entry), and the entries past their
    date that decide for a test (it gates again), each once, in list order."""

    held: dict[str, Entry]
    ended: list[Entry]

    def lines(self) -> list[str]:
        """What the run says of it: the suite's quarantined tests counted, and each ended entry."""
        said = [f"harness: {len(self.held)} quarantined tests run without gating"] if self.held else []
        return said + [
            f"harness: quarantine of {entry.test} ended {entry.until}: it gates again" for entry in self.ended
        ]


def decide(nodeids: Iterable[str], entries: Sequence[Entry], today: datetime.date) -> Decided:
    """Each test's deciding entry (``deciding``; ``entries`` of one platform): held today, or ended."""
    held: dict[str, Entry] = {}
    ended: dict[Entry, None] = {}
    for nodeid in nodeids:
        entry = deciding(nodeid, entries)
        if entry is not None and entry.holds(today):
            held[nodeid] = entry
        elif entry is not None:
            ended[entry] = None
    return Decided(held, list(ended))
