"""Recording: this session's ledger, the runner patches, and one ledger line per test.

Every worker (or the single process) writes ``<ledger dir>/<worker>.jsonl``; under xdist the controller
(``controller``) writes only what the workers cannot, and hands them its ledger directory.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness import ledger
from harness.config import options
from harness.platform import cuda_fork
from harness.pytest_plugin import classes, timeouts
from harness.pytest_plugin.controller import LEDGER_DIR, Controller
from harness.pytest_plugin.pinning import worker_event
from harness.pytest_plugin.session import is_controller, process_context, worker_id
from harness.tracking import patches
from harness.tracking.attribution import CHILD
from harness.tracking.sampler import MemorySampler

if TYPE_CHECKING:
    from harness.config.settings import Settings
    from harness.tracking.context import Context

DIRECTORY = pytest.StashKey[Path]()  # the ledger directory; set in every session that records or controls
STARTED = pytest.StashKey[float]()
TEMPORARY = pytest.StashKey[bool]()  # this process made the ledger directory: it removes it at the end
_SAMPLER = pytest.StashKey[MemorySampler]()
_OUTER_CHILD = pytest.StashKey[str | None]()
Report = pytest.TestReport | None  # a phase's report, None for a phase that did not run
Next = tuple[pytest.Item, str] | None  # the item pytest runs next and its node id; None: the last


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "fresh_engine: this test's runners start their own engines, never taken from or left "
        "to the reuse pool",
    )
    # a pytest run inside a test records as itself, or not at all; the outer session's comes back after it
    config.stash[_OUTER_CHILD] = os.environ.pop(CHILD, None)
    if config.getoption("harness_phases"):  # harness run's one collection: it records nothing
        from harness.pytest_plugin.membership import Membership

        config.pluginmanager.register(Membership(Path(config.getoption("harness_phases"))), "harness-phases")
        return
    if config.getoption("no_harness"):
        return
    here = process_context(config)  # a broken [tool.harness] or device mask is a usage error
    config.stash[DIRECTORY] = _ledger_dir(config, here.settings)
    config.stash[STARTED] = time.time()
    if _reuse_asked(config, here.settings):  # the controller shows their tries too
        from harness.pytest_plugin import reruns

        if not config.pluginmanager.is_registered(reruns):
            config.pluginmanager.register(reruns, "harness-reruns")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(Controller(config.stash[DIRECTORY]), "harness-xdist")
    if not is_controller(config):
        _record(config, here)


def _reuse_asked(config: pytest.Config, settings: Settings) -> bool:
    """``--harness-reuse``, else ``HARNESS_REUSE``, else ``[tool.harness] reuse``."""
    return bool(options.value(options.REUSE, config.getoption(options.REUSE.dest), settings=settings))


def _ledger_dir(config: pytest.Config, settings: Settings) -> Path:
    """The controller's (under xdist), ``--harness-ledger-dir``, the setting, else a temporary one."""
    directory = getattr(config, "workerinput", {}).get(LEDGER_DIR) or options.value(
        options.LEDGER_DIR, config.getoption(options.LEDGER_DIR.dest), settings=settings
    )
    config.stash[TEMPORARY] = directory is None
    return Path(directory or tempfile.mkdtemp(prefix="harness-ledger-")).resolve()


def _record(config: pytest.Config, here: Context) -> None:
    """This process's ledger, the runner patches, the test recorder, the reuse pool and the frozen
    collection."""
    here.owner.worker = worker_id(config)
    args = config.invocation_params.args  # an xdist worker's are the controller's: its options' credentials
    here.writer = writer = ledger.LedgerWriter(config.stash[DIRECTORY], worker=here.owner.worker, args=args)
    patches.install()
    os.environ[CHILD] = here.owner.export(str(writer.directory))
    config.pluginmanager.register(_Recorder(config, writer), "harness-recorder")
    asked = (
        ("vllm", _reuse_asked(config, here.settings)),
        ("hf", here.settings.reuse_hf),
    )
    if kinds := tuple(kind for kind, on in asked if on):
        _reuse(config, here, writer, kinds)
    if here.settings.freeze_collected:
        from harness.pytest_plugin.frozen import Frozen

        config.pluginmanager.register(Frozen(), "harness-frozen")


def _reuse(config: pytest.Config, here: Context, writer: ledger.LedgerWriter, kinds: tuple[str, ...]) -> None:
    """The one reuse pool, of ``kinds``, and the one plugin that drives and closes it; with engine reuse
    the safety net too."""
    from harness.pytest_plugin.safety_net import Reuse  # only when asked: every session would pay its import
    from harness.tracking import reuse

    here.pool = reuse.Pool(writer, here.settings.reuse_engines, kinds)
    plugin = Reuse(here.pool, writer, modes="vllm" in kinds)
    config.pluginmanager.register(plugin, "harness-reuse")
    if "vllm" not in kinds:
        return
    from harness.pytest_plugin import order, reruns

    reruns.add(config, plugin.net)  # the safety net: a test that failed on a handed-on engine

    if not config.pluginmanager.is_registered(order):  # a first run: tests grouped by their parameters
        config.pluginmanager.register(order, order.__name__)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SAMPLER in config.stash:
        config.stash[_SAMPLER].stop()
    if DIRECTORY in config.stash:
        here = process_context(config)
        if here.writer is not None:
            here.writer.close()
        here.writer = here.pool = None
    outer = config.stash.get(_OUTER_CHILD, None)
    if outer is None:
        os.environ.pop(CHILD, None)
    else:
        os.environ[CHILD] = outer
    if config.stash.get(TEMPORARY, False):  # its summary is printed; nothing else reads it
        shutil.rmtree(config.stash[DIRECTORY], ignore_errors=True)


class _Recorder:
    """One session's test events: one ledger line per test, from plain hooks (the run protocol's start and
    the reports).

    Plain hooks rather than wrappers around the run protocol: this runs for every test, and wrappers
    cost more per call. The teardown report, the last a test logs, ends it: no hook of its own for that.
    One object per session, so a pytest run inside a test (pytester) keeps its own.
    """

    def __init__(self, config: pytest.Config, writer: ledger.LedgerWriter):
        self.config, self.writer = config, writer
        self.context = process_context(config)  # this session's, fixed for its life
        self.owner = self.context.owner
        self.nodeid = ""  # the running test's, read once (pytest 9 builds the string on each access)
        self.setup: Report = None  # its setup and call reports, None until logged
        self.call: Report = None
        self.retried = False  # this try of the test is not its last
        self.following: Next = None  # what pytest runs next, as it told this test's protocol
        self.announced: Next = None  # announced by the last test event, not started yet

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The session's ``worker`` event, which every test event after it refers to, and the sampler."""
        self.writer.write(
            "worker",
            sync=False,  # the session's facts: runner events sync, and a host crash loses a session anyway
            **worker_event(self.config),
            phase=self.owner.phase,
            **timeouts.worker_fields(self.config),
        )
        if self.context.settings.memory_sample_s > 0:
            sampler = MemorySampler(self.writer, self.context.platform, self.context.settings.memory_sample_s)
            self.config.stash[_SAMPLER] = sampler.start()
        if not hasattr(self.config, "workerinput"):  # under xdist the controller lists them once
            self.writer.write("collected", sync=False, tests=[item.nodeid for item in session.items])

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """A test-start without its test event marks the test the process died in. The previous test's
        event announced this one (``next``) when pytest knew it would follow: then it costs no write."""
        announced, self.announced = self.announced, None
        if announced is not None and announced[0] is item:
            self.nodeid = announced[1]
        else:
            self.nodeid = item.nodeid
            self.writer.write("test-start", sync=False, nodeid=self.nodeid)
        self.owner.enter_test(self.nodeid, item.location[0])
        cuda_fork.WATCH.test_begins(self.nodeid)  # when the driver was first initialized
        self.following = None if nextitem is None else (nextitem, nextitem.nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Three times a test: a passed phase reads its outcome once (``_unusual`` takes the rest)."""
        when = report.when
        if when == "setup":  # each try of a test logs its setup first
            self.setup, self.call, self.retried = report, None, False
        elif when == "call":
            self.call = report
        if report.outcome != "passed":
            self._unusual(report)
        if when == "teardown" and not self.retried:
            self._finish(report)

    def _unusual(self, report: pytest.TestReport) -> None:
        """A phase that did not pass: a timeout is a finding; a rerun (pytest-rerunfailures) means this try
        of the test is not its last."""
        if report.outcome == "rerun":
            self.retried = True
        elif report.outcome == "failed" and classes.of(report) == "timeout":  # pytest-timeout's, a fact
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else report.longreprtext.strip().splitlines()[-1]
            self.writer.write("finding", type="timeout", test=report.nodeid, message=message)

    def _finish(self, teardown: pytest.TestReport) -> None:
        if self.context.unchecked:  # runners this test (or a fixture torn down with it) stopped
            from harness.tracking.runs import check_released  # loaded by then: the runs are its

            check_released()
        setup, call, following = self.setup, self.call, self.following
        self.writer.test(
            self.nodeid,
            _outcome(setup, call, teardown),
            None if setup is None else setup.duration,
            None if call is None else call.duration,
            teardown.duration,
            None if following is None else following[1],
            classes.of(teardown),  # the teardown's report carries the class a failing phase was given
            _device_bytes(),  # device memory of its own (report.gpu_free); None: no device context
        )
        self.announced = following
        self.owner.leave_test()

    def pytest_sessionfinish(self) -> None:
        patches.check_untracked()  # a runner class the library moved away from the import hook
        # a test announced but never run (-x, an interrupt between tests) is not one the process died in
        not_started = None if self.announced is None else self.announced[1]
        self.writer.write("session-end", sync=False, not_started=not_started)


def _device_bytes() -> int | None:
    """The most bytes torch held on this process's devices during the test; None in a process that never
    imported torch (the allocator module is not even loaded: most sessions never start a runner)."""
    if "torch" not in sys.modules:
        return None
    from harness.platform.allocator import peak_reserved

    return peak_reserved()


def _outcome(setup: Report, call: Report, teardown: pytest.TestReport) -> str:
    """One word for the test, from its phases' reports."""
    if call is not None and call.outcome == "passed" and teardown.outcome == "passed":
        return "passed"  # the common case, decided first (a call runs only after its setup passed; the
        # outcome is read, not the report's ``passed`` property: a call less, every test)
    if setup is not None and setup.failed:
        return "error"
    if (setup is not None and setup.skipped) or (call is not None and call.skipped):
        return "skipped"
    if call is not None and call.failed:
        return "failed"
    if teardown.failed:
        return "error"
    return "passed"
