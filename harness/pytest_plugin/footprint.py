"""Each test's footprint (``harness.select``): the files whose code ran for it, written per session into
``<ledger dir>/footprints/`` for the report.

A test's footprint is what ran in its function, in its module's import and collection, in the setup of
the fixtures it uses (a wider-scoped fixture's setup ran once, for the first test: it counts for each test
that uses it), in the processes it started while it ran (``harness.select.profiler.child``), and in
the processes alive when it began or ended (an engine a class-scoped fixture or reuse hands on; ``_Alive``).
pytest's own machinery around them and fixture teardowns are not recorded: on Python 3.11 each profiled
call costs (``cProfile``, the test's thread only), and a test's own files are in its footprint by its
module's import anyway; on 3.12+ ``sys.monitoring`` costs once per code object and owner (every thread).
Recorded only where asked (``HARNESS_FOOTPRINTS=1``, which ``harness run`` sets where selection is in use):
profiling costs CPU in every test's own process (docs/selection.md), and a run without footprints
costs selection nothing but a conservative choice.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import psutil
import pytest

from harness.ledger.redaction import Redactor
from harness.pytest_plugin.recorder import DIRECTORY
from harness.pytest_plugin.session import is_controller, worker_id
from harness.select import profiler, table

_STATE = pytest.StashKey["_Footprints"]()
_ACTIVE: list[_Footprints] = []  # the recording session's, for a forked child (register_at_fork stays)


@pytest.hookimpl(trylast=True)  # after the recorder's configure: the ledger directory is known
def pytest_configure(config: pytest.Config) -> None:
    if DIRECTORY not in config.stash or is_controller(config) or config.getoption("harness_phases"):
        return
    if os.environ.get(profiler.RECORD) != "1":  # not asked: no profiler's cost
        return
    packages = os.environ.get(profiler.PACKAGES_VARIABLE)
    names = profiler.PACKAGES if packages is None else tuple(p for p in packages.split(",") if p)
    roots = profiler.roots(config.rootpath, names)
    folder = config.stash[DIRECTORY] / table.FOLDER  # made by the first writer: no file, no folder
    state = _Footprints(profiler.recorder(profiler.Paths(roots)), folder, worker_id(config))
    config.stash[_STATE] = state
    config.pluginmanager.register(state, "harness-footprints")
    os.environ[profiler.DIRECTORY] = str(folder)
    os.environ[profiler.ROOTS] = profiler.export(roots)
    if not _ACTIVE:
        os.register_at_fork(after_in_child=_forked)
    _ACTIVE[:] = [state]


def _forked() -> None:
    if _ACTIVE:
        profiler.forked(_ACTIVE[0].recorder, str(_ACTIVE[0].folder), os.environ.get(profiler.TEST))


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    state.recorder.switch(None)
    _ACTIVE.clear()
    for name in (profiler.DIRECTORY, profiler.ROOTS, profiler.TEST):
        os.environ.pop(name, None)


class _Footprints:
    def __init__(self, recorder: profiler.Recorder, folder: Path, worker: str):
        self.recorder, self.folder, self.worker = recorder, folder, worker
        self.tests: dict[str, set[str]] = {}
        self.markers: dict[str, list[str]] = {}
        self.item: pytest.Item | None = None
        self.fixtures: dict[str, set[str]] = {}  # a fixture's name -> the owners of its definitions
        self.tokens: dict[str, str] = {}  # a test's token (what its processes' files name) -> its node id
        self.alive: set[tuple[str, str]] = set()  # (pid, node id): a process alive while the test ran
        self.descendants = _Alive(folder)

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector):
        """A module's import and collection: its code counts for each of its tests."""
        if not isinstance(collector, pytest.Module):
            return (yield)
        previous = self.recorder.switch(f"collect {collector.nodeid}")
        try:
            return (yield)
        finally:
            self.recorder.switch(previous)

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):
        """A fixture's setup: its code counts for every test that uses it."""
        owner = _fixture(fixturedef.baseid, fixturedef.argname)
        self.fixtures.setdefault(fixturedef.argname, set()).add(owner)
        previous = self.recorder.switch(owner)
        try:
            return (yield)
        finally:
            self.recorder.switch(previous)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> None:
        self.item = item
        token = f"{self.worker}-{os.getpid()}-{len(self.tokens)}"  # a process it starts records under it
        self.tokens[token] = item.nodeid
        os.environ[profiler.TEST] = token
        self.alive.update((pid, item.nodeid) for pid in self.descendants.pids())

    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function):
        """The test function's own call: pytest's machinery around it is profiled by none."""
        previous = self.recorder.switch(f"test {pyfuncitem.nodeid}")
        try:
            return (yield)
        finally:
            self.recorder.switch(previous)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        item, self.item = self.item, None
        os.environ.pop(profiler.TEST, None)
        self.alive.update((pid, nodeid) for pid in self.descendants.pids())
        found = self.tests.setdefault(nodeid, set())
        found |= self.recorder.take(f"test {nodeid}")
        found |= self.recorder.files.get(f"collect {nodeid.split('::')[0]}", set())
        if item is None:
            return
        for name in getattr(item, "fixturenames", ()):
            for owner in self.fixtures.get(name, ()):
                if _covers(owner, nodeid):
                    found |= self.recorder.files.get(owner, set())
        self.markers[nodeid] = sorted({mark.name for mark in item.iter_markers()})

    @pytest.hookimpl(trylast=True)  # after pytest's JUnit file: on a nearly full disk, the results first
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """The session's file, without credentials (a test's parameter may be one: the ledger's rule).
        None where an owner could not record: too few files would let selection skip a test it touched."""
        if not self.recorder.complete:
            sys.stderr.write("harness: footprints not recorded: sys.monitoring's tool ids 3 and 4 taken\n")
            return
        data = {
            "tests": [[t, sorted(f)] for t, f in self.tests.items()],
            "markers": [[t, m] for t, m in self.markers.items()],
            "children": [[token, t] for token, t in self.tokens.items()],
            "alive": [list(pair) for pair in sorted(self.alive)],
        }
        args = [*sys.argv, *session.config.invocation_params.args]
        clean = Redactor(os.environ, args).data(data)
        path = self.folder / f"{self.worker}-{os.getpid()}.json"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(clean) + "\n")
        except OSError as error:  # a full disk: one line; the next selection runs these tests (unknown)
            with contextlib.suppress(OSError):  # a half-written file would read as no file at all anyway
                path.unlink(missing_ok=True)
            _said(path, error)


class _Alive:
    """This session's descendant processes alive now: a test counts the files of every one alive when it
    begins or ends, whichever test started it (an engine a class-scoped fixture or reuse hands on runs
    code for each test that uses it). Wider where a process served none of them (a parked engine another
    test takes later), never narrower. Looked for only once a child has recorded (its ``begun-`` file made
    the folder): a session that starts none pays a stat per test."""

    def __init__(self, folder: Path):
        self.folder = folder

    def pids(self) -> set[str]:
        """The process ids of this session's descendants alive now (as their files name them): not a zombie
        (vLLM SIGKILLs an engine process and leaves it unreaped; it runs no code)."""
        if not self.folder.is_dir():
            return set()
        found = set()
        for process in psutil.Process().children(recursive=True):
            try:
                if process.status() != psutil.STATUS_ZOMBIE:
                    found.add(str(process.pid))
            except psutil.Error:  # gone since the listing: it runs nothing more
                continue
        return found


def _said(path: Path, error: OSError) -> None:
    sys.stderr.write(f"harness: footprints not recorded: {path}: {error.strerror or error}\n")


def _fixture(baseid: str, argname: str) -> str:
    return f"fixture {baseid}::{argname}"


def _covers(owner: str, nodeid: str) -> bool:
    """Whether the fixture ``owner`` (``fixture <baseid>::<name>``) is visible to ``nodeid``: its baseid
    (``""`` for a plugin's or the root conftest's) is a prefix of the test's."""
    baseid = owner[len("fixture ") :].rpartition("::")[0]
    return not baseid or nodeid.startswith(baseid)
