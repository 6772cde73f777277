"""The grammar of a test's value in ``HARNESS_CONFIGURATIONS`` (``configurations.json``, which ``harness
run`` writes from its history): ``<fingerprint>``, ``reuse-sensitive``, ``failed`` or ``failed
<fingerprint>``. ``marked`` is its one writer and ``decode`` its one reader (the order, the history and
the reuse safety net); a module of its own, so a pytest session reads it without the report's types.
"""

from __future__ import annotations

from typing import NamedTuple

from harness.config.variables import FAILED


class Mark(NamedTuple):
    """A test's value in ``HARNESS_CONFIGURATIONS``, decoded: whether it failed there, and what the order
    groups it by (the engine configuration it started, or ``reuse-sensitive``; None: neither)."""

    failed: bool
    configuration: str | None


def decode(value: str | None) -> Mark:
    """The one reader of the configurations grammar: ``<fingerprint>``, ``reuse-sensitive``, ``failed`` or
    ``failed <fingerprint>``."""
    if value is None:
        return Mark(False, None)
    if value == FAILED or value.startswith(f"{FAILED} "):
        return Mark(True, value.removeprefix(FAILED).strip() or None)
    return Mark(False, value)


def marked(configuration: str | None) -> str:
    """The one writer of ``failed [<fingerprint>]``: a test that failed there, with its configuration."""
    return f"{FAILED} {configuration}" if configuration else FAILED
