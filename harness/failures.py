"""Failure classes: why a test failed, in one word a CI user can act on (retry it, quarantine it, fix it).

What the run knows for certain decides first (pytest-timeout stopped the test, whatever block it fired in;
the test's process died; the ledger saw a start blocked or an engine process die; the exception's own type,
along its chain of causes), message patterns second (the suite's own, then the harness's), and an
assertion in the test's call last: an assertion that names none of the above is one on the outputs. The
text searched is the failure's messages (each exception's own, or the ledger's line of a crash), never the
source lines pytest prints around them: a comment that reads like an error is not one. Every failure gets
exactly one class; ``other`` where nothing speaks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from harness.errors import ConfigError

# the classes as a type, for the report's schema (its loader checks a class is one of them)
FailureClass = Literal[
    "engine-died",
    "cuda-fork",
    "crashed",
    "start-blocked",
    "out-of-memory",
    "memory-not-settled",
    "network",
    "timeout",
    "accuracy",
    "harness-fault",
    "other",
]
# class -> what it means, in FailureClass's order: the one list the report, JUnit, the summary, settings
# and docs/usage.md name
CLASSES: dict[str, str] = {
    "engine-died": "the engine process died under the test",
    "cuda-fork": "an engine process forked after the test process initialized CUDA failed its start",
    "crashed": "the test's process died under it (a signal, os._exit, a native crash)",
    "start-blocked": "a runner's start was blocked by a live runner, which the message names",
    "out-of-memory": "out of device (or, on the CPU, node) memory at a start or in the test",
    "memory-not-settled": "device memory did not come down before a start: a wait gave up",
    "network": "a model or hub download, or other network access, failed",
    "timeout": "the test ran past its timeout",
    "accuracy": "an assertion on the test's outputs failed",
    "harness-fault": "the harness itself failed (a bug or the machine: a full disk)",
    "other": "none of the above",
}
OTHER = "other"
PROPERTY = "failure_class"  # its name as a pytest user property and a JUnit test case's property
TEXT_LIMIT = 200_000  # characters of a failure's text searched: its end, where the raise is

# exception class names (any class along the MRO of any exception along the chain) that decide a class
_EXCEPTIONS: tuple[tuple[str, frozenset[str]], ...] = (
    ("start-blocked", frozenset({"RunnerBlocked"})),
    ("memory-not-settled", frozenset({"MemoryTimeout"})),
    ("engine-died", frozenset({"EngineDeadError", "EngineGenerateError"})),
    ("out-of-memory", frozenset({"OutOfMemoryError", "MemoryError"})),
    (
        "network",
        frozenset(
            {
                "ConnectionError",  # the builtin, and requests'
                "HTTPError",
                "MaxRetryError",
                "NewConnectionError",
                "LocalEntryNotFoundError",
                "OfflineModeIsEnabled",
                "HfHubHTTPError",
                "gaierror",
            }
        ),
    ),
    ("harness-fault", frozenset({"InfrastructureError"})),
)

# the harness's own message patterns, after a suite's: what each class says when only text is left
_PATTERNS: tuple[tuple[str, str], ...] = (
    ("cuda-fork", r"cuda-fork: the CUDA driver was initialized in the test process"),  # platform.cuda_fork
    ("start-blocked", r"cannot start: .*; held by "),
    ("memory-not-settled", r"Memory of devices .* not free after|memory did not (settle|come down)"),
    ("engine-died", r"EngineDeadError|EngineCore encountered an issue|Engine core proc .* died"),
    (
        "out-of-memory",
        r"(CUDA|HIP|XPU) out of memory|OutOfMemoryError|No available memory for the cache blocks"
        r"|Available memory on node \d+ .* is less than desired"
        r"|Free memory on device .* is less than desired",
    ),
    (
        "network",
        r"huggingface_hub\.errors|LocalEntryNotFoundError|OfflineModeIsEnabled|We couldn't connect to"
        r"|Max retries exceeded|Temporary failure in name resolution|Connection (refused|reset)"
        r"|Name or service not known|Read timed out",
    ),
    ("harness-fault", r"INTERNALERROR"),
)


@dataclass(frozen=True)
class Evidence:
    """What is known of one failure. ``exceptions`` are class names along the MROs of the exception and
    its causes; ``text`` its messages (``messages``), never the source pytest prints around them."""

    text: str = ""
    exceptions: frozenset[str] = frozenset()
    when: str = "call"  # the phase that failed: setup, call or teardown
    timed_out: bool = False  # pytest-timeout stopped it (its own exception, or its thread method's exit)
    crashed: bool = False  # the test's process died under it
    blocked: bool = False  # the ledger: a start of this test was blocked
    engine_died: bool = False  # the ledger: a runner's process of this test exited under it


Patterns = tuple[tuple[str, "re.Pattern[str]"], ...]


def patterns(table: Mapping[str, object], where: str = "[tool.harness] failure_patterns") -> Patterns:
    """A suite's ``{class: [regex, ...]}`` compiled, in its order; a bad class or regex is one line."""
    compiled = []
    for name, expressions in table.items():
        if name not in CLASSES:
            raise ConfigError(f"{where} {name}: unknown failure class (known: {', '.join(CLASSES)})")
        if not isinstance(expressions, list | tuple) or not all(
            isinstance(each, str) and each for each in expressions
        ):
            raise ConfigError(f"{where} {name}: expected a list of regular expressions, got {expressions!r}")
        for expression in expressions:
            try:
                compiled.append((name, re.compile(expression)))
            except re.error as error:
                raise ConfigError(
                    f"{where} {name}: {expression!r} is not a regular expression ({error})"
                ) from None
    return tuple(compiled)


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


_BUILT_IN: Patterns = tuple((name, re.compile(expression)) for name, expression in _PATTERNS)


def classify(evidence: Evidence, suite: Patterns = ()) -> str:
    """The one class of a failure: facts, then the exception's types, then text, then an assertion."""
    if evidence.timed_out:
        return "timeout"
    if evidence.crashed:
        return "crashed"
    if evidence.blocked:
        return "start-blocked"
    if evidence.engine_died:
        return "engine-died"
    for name, names in _EXCEPTIONS:
        if names & evidence.exceptions:
            return name
    text = evidence.text[-TEXT_LIMIT:]
    for name, pattern in (*suite, *_BUILT_IN):
        if pattern.search(text):
            return name
    if evidence.when == "call" and "AssertionError" in evidence.exceptions:
        return "accuracy"
    return OTHER


def chain(error: BaseException | None, depth: int = 16) -> list[BaseException]:
    """``error`` and each cause or context it chains to, once each (a cycle ends), at most ``depth``."""
    found: list[BaseException] = []
    while error is not None and all(error is not seen for seen in found) and len(found) < depth:
        found.append(error)
        error = error.__cause__ or error.__context__
    return found


def exception_names(error: BaseException | None, depth: int = 16) -> frozenset[str]:
    """The class names along the MRO of ``error`` and of each cause or context it chains to."""
    return frozenset(klass.__name__ for each in chain(error, depth) for klass in type(each).__mro__)


def messages(error: BaseException | None, depth: int = 16) -> str:
    """What ``error`` and its chain say, one ``Type: message`` line each, then its notes (PEP 678: where
    the harness names a cause, ``platform.cuda_fork``): the text patterns read."""
    lines = []
    for each in chain(error, depth):
        notes = getattr(each, "__notes__", ())
        lines += [
            f"{type(each).__name__}: {_said(each)}",
            *map(_said, notes if isinstance(notes, list) else ()),
        ]
    return "\n".join(lines)


def _said(value: object) -> str:
    """``str(value)``; one whose ``__str__`` raises says nothing (pytest prints it so: it fails no run)."""
    try:
        return str(value)
    except Exception:  # noqa: BLE001 -- any error of a test's own __str__
        return ""


def counts(classes: Iterable[str]) -> dict[str, int]:
    """Failures per class, in the classes' own order, classes with none left out."""
    seen = list(classes)
    return {name: seen.count(name) for name in CLASSES if name in seen}
