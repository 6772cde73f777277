"""The one process context: platform, settings, live holders, ownership, the ledger writer, the reuse pool.

Found one way: inside pytest the plugin configures it from pytest's rootdir (``configure``); anywhere else
the first use finds ``pyproject.toml`` from the current directory. ``use`` swaps in another context (a
nested pytest session, a test's fake platform) and returns the one it replaced. Runner finalizers and the
memory sampler reach it from other threads: the holders and the stopped runners are locked.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config.pyproject import find_pyproject
from harness.config.settings import Settings, load_settings
from harness.platform import detect
from harness.platform.base import Platform
from harness.tracking.attribution import Attribution

if TYPE_CHECKING:
    from harness.ledger.writer import LedgerWriter
    from harness.memory.admission import Holders


class Context:
    """One process's state; a plain class, not a dataclass: it has identity, not a value, and a dataclass's
    generated methods cost every session their compilation.

    The live holders are made at the first runner or held fixture: a session that starts none never imports
    the admission check.
    """

    def __init__(self, platform: Platform, settings: Settings) -> None:
        self.platform, self.settings = platform, settings
        self.owner = Attribution()
        self.writer: LedgerWriter | None = None  # None: not recording
        # the one keeper when reuse or HF reuse is on, else None: a harness.tracking.reuse.Pool, which builds
        # on this module (reuse.pool() is its typed way in)
        self.pool: Any = None
        # the running test's terms with the pool (a reuse.Terms), set by the safety-net plugin at each try
        self.test: Any = None
        self.unchecked: list[Any] = []  # stopped runs whose release is not checked yet
        # runner starts of this process and their seconds, and the starts reuse avoided and theirs: what a
        # rerun of a test cost and used (``pytest_plugin.reruns``)
        self.starts, self.started_s, self.reused, self.reused_s = 0, 0.0, 0, 0.0
        # a start under way in this thread (``starts.starting``): a load inside a load (SentenceTransformer ->
        # from_pretrained) counts once, and a fork meanwhile is vLLM's engine process, not a test's
        self.starting = threading.local()
        self._holders: Holders | None = None
        self._lock = threading.Lock()

    @property
    def holders(self) -> Holders:
        if self._holders is None:
            from harness.memory.admission import Holders

            with self._lock:
                if self._holders is None:
                    self._holders = Holders()
        return self._holders

    def release(self, key: object) -> None:
        """Release the holder of ``key`` (a fixture's), if any was made."""
        if self._holders is not None:
            self._holders.release(key)

    def stopped(self, run: Any) -> None:
        with self._lock:
            self.unchecked.append(run)

    def take_stopped(self) -> list[Any]:
        if not self.unchecked:  # nearly always empty: no lock for that
            return []
        with self._lock:
            runs, self.unchecked = self.unchecked, []
        return runs


_current: Context | None = None
_lock = threading.Lock()


def _forked() -> None:
    """A forked child (vLLM's fork_new_process_for_each_test) has one thread: a lock another thread held at
    the fork would never be released there."""
    global _lock
    _lock = threading.Lock()
    if _current is not None:
        _current._lock = threading.Lock()


os.register_at_fork(after_in_child=_forked)


def build(pyproject: Path | None, env: Mapping[str, str] = os.environ) -> Context:
    """A context for the project of ``pyproject`` (its ``[tool.harness]``) on the platform ``env`` selects,
    detected here, once, and handed down with the context to whatever asks for it."""
    platform = detect(env).platform
    return Context(platform, load_settings(platform.name, pyproject, env))


def current() -> Context:
    """This process's context, built from the current directory on first use outside pytest."""
    global _current
    found = _current
    if found is not None:  # every runner event and test asks: no lock once set (a swap is one assignment)
        return found
    with _lock:
        if _current is None:
            _current = build(find_pyproject())
        return _current


def use(context: Context | None) -> Context | None:
    """Make ``context`` this process's (None: found again on next use); returns the one it replaces."""
    global _current
    with _lock:
        previous, _current = _current, context
    return previous
