"""pytest plugin glue: attribution hooks, the ledger per worker, runner fixtures, terminal summary.
Registered by the entry point (``plugin``) when the session asked for the harness.

Every worker (or the single process) writes ``<ledger dir>/<worker>.jsonl``; under xdist the controller
writes nothing and reads the whole directory for the summary, so a worker that was killed still counts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness import ledger
from harness.pytest_plugin import CONFIGURATIONS, timeouts
from harness.pytest_plugin.workers import is_controller, process_context, worker_event, worker_id
from harness.tracking import patches
from harness.tracking.attribution import CHILD
from harness.tracking.sampler import MemorySampler

if TYPE_CHECKING:
    from harness.config.settings import Settings
    from harness.ledger.records import Record
    from harness.tracking.context import Context
    from harness.tracking.reuse import Pool

_DIR = pytest.StashKey[Path]()
_STARTED = pytest.StashKey[float]()
_SAMPLER = pytest.StashKey[MemorySampler]()
_OUTER_CHILD = pytest.StashKey[str | None]()
_TEMPORARY = pytest.StashKey[bool]()  # this process made the ledger directory: it removes it at the end
Report = pytest.TestReport | None  # a phase's report, None for a phase that did not run
Next = tuple[pytest.Item, str] | None  # the item pytest runs next and its node id; None: the last


def _enabled(config: pytest.Config) -> bool:
    return _DIR in config.stash


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
    config.stash[_DIR] = _ledger_dir(config, here.settings)
    config.stash[_STARTED] = time.time()
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_Controller(config.stash[_DIR]), "harness-xdist")
    if not is_controller(config):
        _record(config, here)


def _ledger_dir(config: pytest.Config, settings: Settings) -> Path:
    """The controller's (under xdist), ``--harness-ledger-dir``, the setting, else a temporary one."""
    directory = (
        getattr(config, "workerinput", {}).get("harness_ledger_dir")
        or config.getoption("harness_ledger_dir")
        or settings.ledger_dir  # [tool.harness] ledger_dir, or HARNESS_LEDGER_DIR
    )
    config.stash[_TEMPORARY] = directory is None
    return Path(directory or tempfile.mkdtemp(prefix="harness-ledger-")).resolve()


def _record(config: pytest.Config, here: Context) -> None:
    """This process's ledger, the runner patches, the test recorder, the reuse pool and the frozen
    collection."""
    here.owner.worker = worker_id(config)
    here.writer = writer = ledger.LedgerWriter(config.stash[_DIR], worker=here.owner.worker)
    patches.install()
    os.environ[CHILD] = here.owner.export(str(writer.directory))
    config.pluginmanager.register(_Recorder(config, writer), "harness-recorder")
    if here.settings.reuse or config.getoption("harness_reuse"):
        from harness.tracking import reuse  # only when asked: every session would pay its import

        here.pool = reuse.Pool(writer, here.settings.reuse_engines)
        config.pluginmanager.register(_Reuse(here.pool), "harness-reuse")
    if here.settings.freeze_collected:
        from harness.pytest_plugin.frozen import Frozen

        config.pluginmanager.register(Frozen(), "harness-frozen")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SAMPLER in config.stash:
        config.stash[_SAMPLER].stop()
    if _DIR in config.stash:
        here = process_context(config)
        if here.writer is not None:
            here.writer.close()  # its file's zero tail cut now, not at the interpreter's exit
        here.writer = here.pool = None
    outer = config.stash.get(_OUTER_CHILD, None)
    if outer is None:
        os.environ.pop(CHILD, None)
    else:
        os.environ[CHILD] = outer
    if config.stash.get(_TEMPORARY, False):  # its summary is printed; nothing else reads it
        shutil.rmtree(config.stash[_DIR], ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With a previous run's configurations (``harness run --durations-from``), run tests that started the
    same configuration one after another; without, and with reuse on, tests of the same parameters; after
    pytest's own grouping of fixture parameters."""
    path = os.environ.get(CONFIGURATIONS)
    if config.getoption("no_harness") or not (path or config.pluginmanager.hasplugin("harness-reuse")):
        return
    from harness.pytest_plugin import order

    items[:] = order.by_configuration(items, order.load(path)) if path else order.by_parameters(items)


class _Controller:
    """Hands the controller's ledger directory to every xdist worker, lists what was collected, and
    records workers that crash.

    A crashed worker (SIGKILL, ``os._exit``, pytest-timeout's thread method) cannot say so itself; the
    controller writes a ``crash`` event naming the test and how the worker ended into ``controller.jsonl``,
    and its scheduler drops that test from its work unit, so the replacement worker does not run it again.
    """

    def __init__(self, directory: Path):
        self.directory = directory
        self.writer: ledger.LedgerWriter | None = None
        self.listed = False

    def _write(self, event: str, **fields) -> None:
        self.writer = self.writer or ledger.LedgerWriter(self.directory, worker="controller")
        self.writer.write(event, **fields)

    def pytest_configure_node(self, node) -> None:
        node.workerinput["harness_ledger_dir"] = str(self.directory)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        if not self.listed:  # every worker collects the same ids (xdist checks); one list is enough
            self.listed = True
            self._write("collected", sync=False, tests=list(ids))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log):
        from harness.pytest_plugin import crashes  # xdist's schedulers: imported by the controller only

        return crashes.scheduler(config, log)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report, sched) -> None:
        from harness.pytest_plugin import crashes

        worker = report.node.gateway.id
        how = ledger.ended(crashes.returncode(_last_pid(self.directory / f"{worker}.jsonl")))
        self._write("crash", test=crashitem, worker=worker, how=how)


def _last_pid(path: Path) -> int | None:
    """The pid of the last process that wrote ``path`` (its ``worker`` event)."""
    pids = [e.get("pid") for e in ledger.events(path) if e["event"] == "worker"]
    return pids[-1] if pids and isinstance(pids[-1], int) else None


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
        """The session's ``worker`` event, which every test event after it refers to, and the sampler.

        Not at configure: a forced GPU platform may list its devices in a thread meanwhile (``detect_later``).
        """
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
        elif report.outcome == "failed" and _timed_out(report):
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else report.longreprtext.strip().splitlines()[-1]
            self.writer.write("finding", type="timeout", test=report.nodeid, message=message)

    def _finish(self, teardown: pytest.TestReport) -> None:
        if self.context.unchecked:  # runners this test (or a fixture torn down with it) stopped
            from harness.tracking.starts import check_released  # loaded by then: the runs are its

            check_released()
        setup, call, following = self.setup, self.call, self.following
        self.writer.test(
            self.nodeid,
            _outcome(setup, call, teardown),
            None if setup is None else setup.duration,
            None if call is None else call.duration,
            teardown.duration,
            None if following is None else following[1],
        )
        self.announced = following
        self.owner.leave_test()

    def pytest_sessionfinish(self) -> None:
        patches.check_untracked()  # a runner class the library moved away from the import hook
        # a test announced but never run (-x, an interrupt between tests) is not one the process died in
        not_started = None if self.announced is None else self.announced[1]
        self.writer.write("session-end", sync=False, not_started=not_started)


class _Reuse:
    """The reuse pool's view of the session: which test opted out, and the end of the session."""

    def __init__(self, pool: Pool):
        self.pool = pool

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Before the test's fixtures: they may build runners too."""
        if item.get_closest_marker("fresh_engine") is not None:
            self.pool.fresh_test(item.nodeid)
        else:
            self.pool.fresh = False

    def pytest_sessionfinish(self) -> None:
        """Warm engines are shut down (and their stops recorded) while the ledger is still open."""
        self.pool.close()


def _timed_out(report: pytest.TestReport) -> bool:
    """Whether pytest-timeout failed this test (its signal method fails it with its own message)."""
    from pytest_timeout import PYTEST_FAILURE_MESSAGE

    before, after = PYTEST_FAILURE_MESSAGE.split("%s")
    text = report.longreprtext
    return before in text and after in text


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


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """Attribute runners built during a fixture's setup to it, and hold fixtures that grew memory."""
    if not _enabled(request.config) or process_context(request.config).writer is None:
        return (yield)
    from harness.tracking import starts  # at the first fixture, not in a session that sets up none

    with starts.fixture_setup(("fixture", id(fixturedef)), fixturedef.argname, fixturedef.scope):
        return (yield)


def pytest_fixture_post_finalizer(fixturedef, request) -> None:
    if _enabled(request.config):
        process_context(request.config).release(("fixture", id(fixturedef)))


@pytest.fixture(scope="session")
def vllm_runner():
    """The ``VllmRunner`` class, session-scoped as in vLLM's conftest, so class- and module-scoped engine
    fixtures can build from it."""
    from harness.runners import VllmRunner  # where a test asks for it: a session that builds none skips it

    return VllmRunner


@pytest.fixture(scope="session")
def hf_runner():
    """The ``HfRunner`` class, session-scoped as in vLLM's conftest."""
    from harness.runners import HfRunner

    return HfRunner


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    if not _enabled(config) or hasattr(config, "workerinput"):
        return
    writer = process_context(config).writer
    if (writer is not None and writer.alone_and_quiet()) or ledger.quiet(config.stash[_DIR]):
        return  # the common case, told without reading every test's events back
    since = config.stash[_STARTED]
    merged = ledger.read(config.stash[_DIR])
    records = [r for r in merged.records if r["start"] >= since]
    findings = [f for f in merged.findings if f["t"] >= since]
    if not records and not findings:
        return  # a session that started no runner has nothing to account for
    started = ledger.started(records)
    write = terminalreporter.write_line
    terminalreporter.write_sep("=", "harness: runner starts")
    blocked = sum(r["outcome"] == "blocked" for r in records)
    failed = sum(r["outcome"] == "failed" for r in records)
    kept = "temporary, removed at exit" if config.stash[_TEMPORARY] else config.stash[_DIR]
    reuses = [r for r in merged.reuses if r["t"] >= since]
    avoided = (
        f", {len(reuses)} avoided by reuse ({sum(r.get('saved_s') or 0 for r in reuses):.1f} s saved)"
        if reuses
        else ""
    )
    write(
        f"{len(started)} runner starts ({_by_kind(started)}), {blocked} blocked, {failed} failed{avoided}; "
        f"ledger: {kept}"
    )
    per_file: dict[str, list[Record]] = defaultdict(list)
    for record in started:
        per_file[record.get("file") or "<outside tests>"].append(record)
    for file, in_file in sorted(per_file.items()):
        write(f"  {file}: {len(in_file)} ({_by_kind(in_file)})")
        repeated = Counter((r["kind"], r["model"], r["fingerprint"]) for r in in_file)
        for (kind, model, fingerprint), count in sorted(repeated.items()):
            if count > 1:
                write(f"    started {count}x in this file: {kind} {model} [{fingerprint}]")
    if findings:
        terminalreporter.write_sep("-", f"harness: {len(findings)} findings")
        for finding in findings:
            write(f"  {finding['type']}: {finding['message']}")


def _by_kind(records: list[Record]) -> str:
    counts = Counter(r["kind"] for r in records)
    return ", ".join(f"{kind} {count}" for kind, count in sorted(counts.items())) or "none"
