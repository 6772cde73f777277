"""pytest plugin glue: attribution hooks, the ledger per worker, runner fixtures, terminal summary.
Registered by the entry point (``plugin``) when the session asked for the harness.

Every worker (or the single process) writes ``<ledger dir>/<worker>.jsonl``; under xdist the controller
writes nothing and reads the whole directory for the summary, so a worker that was killed still counts.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from harness import ledger
from harness.errors import HarnessError
from harness.memory import admission
from harness.pytest_plugin.workers import is_controller, worker_event, worker_id
from harness.runners import HfRunner, VllmRunner
from harness.tracking import attribution, patches, starts
from harness.tracking.sampler import MemorySampler

_DIR = pytest.StashKey[Path]()
_STARTED = pytest.StashKey[float]()
_DEVICE = pytest.StashKey[str | None]()
_SAMPLER = pytest.StashKey[MemorySampler]()


def _enabled(config: pytest.Config) -> bool:
    return _DIR in config.stash


def pytest_configure(config: pytest.Config) -> None:
    try:  # a broken [tool.harness] or device mask is one line, not an INTERNALERROR
        platform, settings = starts.platform(), starts.settings()
    except HarnessError as error:
        raise pytest.UsageError(str(error)) from None
    workerinput = getattr(config, "workerinput", {})
    directory = (
        workerinput.get("harness_ledger_dir")
        or config.getoption("harness_ledger_dir")
        or settings.ledger_dir  # [tool.harness] ledger_dir, or HARNESS_LEDGER_DIR
        or tempfile.mkdtemp(prefix="harness-ledger-")
    )
    config.stash[_DIR] = Path(directory).resolve()
    config.stash[_STARTED] = time.time()
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_Controller(config.stash[_DIR]), "harness-xdist")
    if is_controller(config):
        return
    worker = worker_id(config)
    attribution.set_worker(worker)
    writer = ledger.LedgerWriter(config.stash[_DIR], worker=worker)
    starts.activate(writer)
    patches.install()
    config.pluginmanager.register(_Recorder(config, writer), "harness-recorder")
    if settings.memory_sample_s > 0:
        config.stash[_SAMPLER] = MemorySampler(writer, platform, settings.memory_sample_s).start()
    writer.write("worker", **worker_event(config))


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SAMPLER in config.stash:
        config.stash[_SAMPLER].stop()
    starts.deactivate()


class _Controller:
    """Hands the controller's ledger directory to every xdist worker, and records workers that crash.

    A crashed worker (SIGKILL, pytest-timeout's thread method ending it with ``os._exit``) cannot say so
    itself; the controller writes the finding into its own ``controller.jsonl``.
    """

    def __init__(self, directory: Path):
        self.directory = directory
        self.writer: ledger.LedgerWriter | None = None

    def pytest_configure_node(self, node) -> None:
        node.workerinput["harness_ledger_dir"] = str(self.directory)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report, sched) -> None:
        self.writer = self.writer or ledger.LedgerWriter(self.directory, worker="controller")
        message = (str(report.longrepr).strip().splitlines() or [f"a worker crashed running {crashitem}"])[0]
        self.writer.write("finding", type="worker-crash", test=crashitem, message=message)


class _Recorder:
    """One session's test events, from pytest's plain report hooks.

    Plain hooks rather than wrappers around the run protocol: this runs for every test, and wrappers
    cost more per call. One object per session, so a pytest run inside a test (pytester) keeps its own.
    """

    def __init__(self, config: pytest.Config, writer: ledger.LedgerWriter):
        self.config, self.writer = config, writer
        self.reports: dict[str, pytest.TestReport] = {}

    def pytest_runtest_logstart(self, nodeid: str, location: tuple) -> None:
        attribution.enter_test(nodeid, location[0])
        self.reports = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reports[report.when] = report
        if report.failed and _timed_out(report):
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else report.longreprtext.strip().splitlines()[-1]
            self.writer.write("finding", type="timeout", test=report.nodeid, message=message)

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple) -> None:
        starts.check_released()  # runners this test (or a fixture torn down with it) stopped
        self.writer.write(
            "test",
            sync=False,
            nodeid=nodeid,
            file=location[0],
            outcome=_outcome(self.reports),
            setup_s=_seconds(self.reports, "setup"),
            call_s=_seconds(self.reports, "call"),
            teardown_s=_seconds(self.reports, "teardown"),
            worker=self.writer.worker,
            device=_device(self.config),
            phase=os.environ.get("HARNESS_PHASE"),
        )
        attribution.leave_test()


def _timed_out(report: pytest.TestReport) -> bool:
    """Whether pytest-timeout failed this test (its signal method fails it with its own message)."""
    from pytest_timeout import PYTEST_FAILURE_MESSAGE

    before, after = PYTEST_FAILURE_MESSAGE.split("%s")
    text = report.longreprtext
    return before in text and after in text


def _seconds(reports: dict, when: str) -> float | None:
    report = reports.get(when)
    return None if report is None else round(report.duration, 3)


def _outcome(reports: dict) -> str:
    setup, call, teardown = (reports.get(w) for w in ("setup", "call", "teardown"))
    if setup is not None and setup.failed:
        return "error"
    if any(r is not None and r.skipped for r in (setup, call)):
        return "skipped"
    if call is not None and call.failed:
        return "failed"
    if teardown is not None and teardown.failed:
        return "error"
    return "passed"


def _device(config: pytest.Config) -> str | None:
    """The UUID of this process's first visible device; read once, the pin does not change mid-session."""
    if _DEVICE not in config.stash:
        devices = starts.platform().devices()
        config.stash[_DEVICE] = devices[0].uuid if devices else None
    return config.stash[_DEVICE]


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """Attribute runners built during a fixture's setup to it, and hold fixtures that grew memory."""
    if not _enabled(request.config) or starts.writer() is None:
        return (yield)
    with starts.fixture_setup(("fixture", id(fixturedef)), fixturedef.argname, fixturedef.scope):
        return (yield)


def pytest_fixture_post_finalizer(fixturedef, request) -> None:
    admission.release(("fixture", id(fixturedef)))


@pytest.fixture
def vllm_runner():
    """The ``VllmRunner`` class, as vLLM's own conftest hands it out."""
    return VllmRunner


@pytest.fixture
def hf_runner():
    """The ``HfRunner`` class, as vLLM's own conftest hands it out."""
    return HfRunner


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    if not _enabled(config) or hasattr(config, "workerinput"):
        return
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
    write(
        f"{len(started)} runner starts ({_by_kind(started)}), {blocked} blocked, {failed} failed; "
        f"ledger: {config.stash[_DIR]}"
    )
    per_file: dict[str, list[dict]] = defaultdict(list)
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


def _by_kind(records: list[dict]) -> str:
    counts = Counter(r["kind"] for r in records)
    return ", ".join(f"{kind} {count}" for kind, count in sorted(counts.items())) or "none"
