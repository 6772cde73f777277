"""``harness run SUITE``: the suite's phases in order, one pytest process each.

A phase is one ``python -m pytest`` process, so the memory a phase's runners held is given back (the
process is gone) before the next phase starts, whatever the tests leaked. Phases run in order and the run
goes on after a failing one unless ``--fail-fast``; the exit code is the worst phase's
(``harness.run.exits``). Before the first phase one collection says what each phase selects
(``harness.run.selection``): a phase that selects nothing is not started, and a test runs in the first
phase that selects it only.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.config import options
from harness.config.pyproject import find_pyproject, read_table
from harness.config.settings import Settings, ci_deadline, load_settings
from harness.config.suites import Suite, check_paths, load_suite, run_dir
from harness.config.variables import (
    COMPILE_CACHE,
    GPU_FREE,
    GPU_FREE_TESTS,
    SWITCH,
)
from harness.errors import HarnessError
from harness.ledger.redaction import Redactor
from harness.platform import detect
from harness.platform.slots import auto_workers
from harness.report import baseline as before_after
from harness.report import gpu_free_job, quarantine_list
from harness.report.finalize import finalize
from harness.report.outcomes import NO_TESTS
from harness.report.previous import History
from harness.report.schema import Report
from harness.report.store import write_atomic
from harness.report.union import account_shard, line
from harness.run import directory, kept_cache, selecting
from harness.run import history as past
from harness.run.exits import phase_exit, run_exit
from harness.run.process import Stopped, ignore_stop_signals, phase_timeout, stop_signals
from harness.run.resume import run_resuming
from harness.run.selection import claimed, members
from harness.run.shards import arguments_file, decide, flags, parse_shard, weights
from harness.select.profiler import PACKAGES_VARIABLE
from harness.split import Shard

# set by harness run for each phase: a user's value would send results where the report does not look
RESERVED = ("--harness-ledger-dir", "--junitxml", "--junit-xml", "--junitprefix", "--no-harness")


def main(args) -> int:
    """``harness run SUITE``: the suite's phases in order, one pytest process each; see the module doc."""
    # each phase is a top-level pytest session, even when harness run itself runs inside an xdist worker
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_XDIST_")}
    if args.platform:
        env["HARNESS_PLATFORM"] = args.platform
    detection = detect(env)
    platform = detection.platform.name
    pyproject = find_pyproject()
    settings = load_settings(platform, pyproject, env)
    root = pyproject.parent if pyproject else Path.cwd()  # a missing or bad quarantine file: one line, now
    quarantined = quarantine_list.held(
        quarantine_list.entries(settings.quarantine, settings.quarantine_file, root, platform)
    )
    suite = load_suite(read_table(pyproject), args.suite, args.phases)
    args.changed_since, args.shadow = selecting.asked(args.changed_since, args.shadow, env)
    selecting.arm_footprints(env, args.changed_since, args.shadow)
    env[PACKAGES_VARIABLE] = selecting.packages(read_table(pyproject))  # what footprints record
    for phase in suite.phases:  # each names files in the run directory (junit/<phase>.xml, ledger/<phase>/)
        directory.segment("phase", phase.name)
    check_paths(suite, pyproject.parent if pyproject else Path.cwd())
    given = _pytest_args(args.pytest_args or [])
    flagged, durations, extra = flags(given)  # pytest-shard's flags after --: the run's shard, split once
    shard = parse_shard(args.shard, env)
    if shard and flagged and shard != flagged:
        raise HarnessError(f"--shard {shard} and --num-shards/--shard-id {flagged} ask for different shards")
    shard = shard or flagged
    mode = gpu_free_job.mode(options.value(options.GPU_FREE_OPTION, getattr(args, "gpu_free", None), env))
    # the previous run, read once; CI reaches pytest through `nox -s X -- args`, so also from the environment
    given_history = past.choose(args, env, durations, suite.name, platform, mode)
    if env.get(COMPILE_CACHE):  # CI's kept compile cache: engines start from the graphs it holds
        variables, line = kept_cache.kept(Path(env[COMPILE_CACHE]), platform, env)
        env.update(variables)
        print(f"harness: {line}", file=sys.stderr)
    where = shard.name if shard else None
    moved = _moved(mode, given_history.history, platform)
    if moved is not None and not moved.tests and mode == "only":
        return 0  # the CPU job with nothing listed: nothing to run (said on stderr)
    out = Path(args.out or run_dir(directory.segment("suite", suite.name), platform, where))
    if mode == "only" and not args.out and moved is not None:  # beside its GPU cell's
        out = Path(f"{run_dir(suite.name, str(moved.platform), where)}-{gpu_free_job.KEPT}")
    baseline = options.value(options.BASELINE, args.baseline, settings=settings)
    before_after.refuse_itself(out, baseline)  # before the run clears out
    with directory.locked(out) as lock, stop_signals():
        try:
            directory.clear(out)
            past.configurations(given_history.history, out, env)  # the plugin orders tests by them
            if moved is not None and moved.tests:  # the plugin deselects them, or keeps only them
                listing = {"mode": mode, "source": moved.source, "tests": moved.tests}
                write_atomic(out / "gpu-free.json", json.dumps(listing, indent=1) + "\n")
                env[GPU_FREE_TESTS] = str((out / "gpu-free.json").resolve())
            run = _Run(out, {}, {}, extra, env, settings, Console(), ci_deadline(env), lock)
            run.baseline = baseline
            run.quarantined = quarantined
            run.previous, run.weights = given_history.history, given_history.weights
            run.history = given_history.record
            run.learned = bool(args.timeouts_from_history)
            if args.changed_since:  # --changed-since REF [--shadow]: decided after the run's one collection
                run.changed = (args.changed_since, args.shadow)
                run.table = read_table(pyproject)
            return _run(run, suite, detection, shard, args.fail_fast)
        except Stopped as stopped:  # before the first phase: nothing ran, nothing to report
            return 128 + stopped.signum


def _moved(mode: str | None, history: History | None, platform: str) -> gpu_free_job.Moved | None:
    """``--gpu-free`` / ``HARNESS_GPU_FREE`` (``mode``; the generated CI's, ``gpu_free_job``): the GPU-free
    tests the history lists, which a GPU step leaves out and the CPU job runs alone; None when not asked."""
    if mode is None:
        return None
    if mode == "only" and platform != "cpu":
        raise HarnessError(f"{GPU_FREE}=only runs the GPU-free tests on the CPU: use --platform cpu")
    moved = gpu_free_job.listed(history)
    verb = "run here, on the CPU" if mode == "only" else "left to the CPU job"
    print(f"harness: {moved.line}" + (f": {verb}" if moved.tests else ""), file=sys.stderr)
    return moved


def _pytest_args(extra: list[str]) -> list[str]:
    """The user's pytest arguments; those the harness sets per phase would hide the phase's results."""
    for arg, following in zip(extra, [*extra[1:], None], strict=False):
        if arg.startswith(RESERVED):
            raise HarnessError(f"pytest argument {arg!r}: harness run sets it for each phase; leave it out")
        plugin = following if arg == "-p" else arg[2:].lstrip("= ") if arg.startswith("-p") else None
        if plugin == "no:harness":
            shown = f"-p {following}" if arg == "-p" else arg
            raise HarnessError(f"pytest argument {shown!r} turns the harness off in its phases; leave it out")
    return list(extra)


@dataclass
class _Run:
    """What every phase of one ``harness run`` shares."""

    out: Path
    meta: dict
    selected: dict
    extra: list[str]
    env: dict
    settings: Settings
    console: Console
    deadline: float | None  # HARNESS_CI_DEADLINE: phases end in time for the report
    lock: int  # the run directory's lock: each phase's keeper holds it until the phase's processes are gone
    workers: int | None = None  # what per-gpu resolves to (harness.platform.slots.auto_workers)
    found: dict[str, list[str]] | None = None  # each phase's node ids, from the run's one collection
    earlier: dict[str, list[str]] = field(default_factory=dict)  # ... that an earlier phase takes
    baseline: str | None = None  # the base branch's report: the summary opens with before -> after
    split: dict | None = None  # a shard's record of the run's one split (harness.split.Plan.record)
    previous: History | None = None  # the previous run, read once (harness.run.history)
    weights: History | None = None  # what the split weighs by: it, or --harness-durations beside it
    learned: bool = False  # --timeouts-from-history: each recorded test's timeout from its place's cost
    rootdir: Path | None = None  # pytest's, from the run's collection: node ids are relative to it
    broken: bool = False  # a shard whose collection failed: its phases only collect, to show why
    history: dict | None = None  # --history: its source and the tests that failed there, or why none
    quarantined: Callable[[str], bool] | None = None  # whether a test is quarantined: its crash does not gate
    changed: tuple | None = None  # --changed-since REF and --shadow (harness.run.selecting)
    table: dict = field(default_factory=dict)  # [tool.harness], for [tool.harness.select]


def _run(run: _Run, suite: Suite, detection, shard, fail_fast: bool) -> int:
    """The phases in order, then the report; a SIGTERM/SIGHUP/SIGINT stops them and still reports."""
    out, env, settings = run.out, run.env, run.settings
    platform = detection.platform.name
    meta: dict[str, Any] = {
        "suite": suite.name,
        "platform": platform,
        "platform_reason": detection.reason,
        "shard": str(shard) if shard else None,
        "started": time.time(),
        "baseline": run.baseline,
        "split": run.split,
        **({"history": run.history} if run.history is not None else {}),
        "phases": [],
    }
    run.meta = meta
    _write(out, meta)
    where = escape(f"{platform} ({detection.reason}) → {out}")  # a path's "[bold]" is text, not markup
    run.console.print(f"[bold]harness run {suite.name}[/] on {where}")
    env["HARNESS_PLATFORM"] = platform  # every phase's pytest agrees with this run's platform
    env[SWITCH] = "1"  # the plugin acts in every phase, whether or not the suite's pyproject asks
    run.workers = auto_workers(detection.platform, settings, env)
    paths = [(phase, phase.paths) for phase in suite.phases]
    # without pytest-shard's flags (the run splits; an installed pytest-shard would split this collection)
    run.found, chosen = members(paths, run.extra, env, out, settings.phase_timeout_s, [run.lock])
    # the run's -m / -k, as pytest read them, narrow each phase's own
    suite = Suite(suite.name, tuple(p.narrowed(chosen["markers"], chosen["keywords"]) for p in suite.phases))
    run.earlier = claimed([phase.name for phase in suite.phases], run.found or {})
    if run.changed:
        ref, shadow = run.changed
        meta["selection"] = selecting.prepare(
            ref, shadow, run.previous, run.table, run.found, chosen.get("rootdir"), out, env
        )
        _write(out, meta)
    if shard:
        _split(run, suite, shard, chosen)
    if run.learned:  # computed with the order each phase's pytest gives its own tests (the collection's)
        past.timeouts(run.previous, settings.test_timeout_s, _phases_tests(run), out, env)
    stopped = None
    try:
        for number, phase in enumerate(suite.phases, 1):
            run.console.rule(f"phase {number}/{len(suite.phases)}: {phase.name}")
            entry = _phase(run, phase)
            stopped = entry.get("stopped")
            if stopped or (fail_fast and phase_exit(entry["exit_code"], entry["timed_out"])):
                run.console.print(f"{stopped or '--fail-fast'}: stopping after phase {phase.name}")
                break
    except Stopped as signal_:  # between phases: nothing of ours runs
        stopped = str(signal_)
    result = run_exit(meta["phases"])
    with ignore_stop_signals():  # the report is what a cancelled job leaves; let it be written whole
        accounted = _finish(out, meta, run.console, env)
    if stopped:
        return 128 + signal.Signals[stopped].value
    return result or (0 if accounted is not False else 1)  # a test of the shard that never ran: failed


def _phase(run: _Run, phase) -> dict:
    """Run one phase (resumed after crashes) and add its entry to ``phases.json``."""
    shard = run.meta["shard"]
    mine = run.selected.get(phase.name, []) if shard and not run.broken else None
    paths = None
    if mine:  # the run's split decided this phase's tests: pytest gets exactly those node ids
        found = (run.found or {}).get(phase.name, [])
        paths = (f"@{arguments_file(run.out, phase.name, mine, found, run.rootdir)}",)
    started = time.time()
    taken = run.earlier.get(phase.name, [])
    count = None if run.found is None else len(run.found.get(phase.name, [])) - len(taken)
    count = len(mine) if mine is not None else count
    empty = _empty(phase, count, shard)
    if empty:
        run.console.print(empty)
        result = {"exit_code": NO_TESTS, "timed_out": False, "stopped": None, "attempts": 0}
        args_ = []
    else:
        timeout = phase_timeout(phase.timeout_s or run.settings.phase_timeout_s, run.deadline, time.time())
        deselect = [f"--deselect={nodeid}" for nodeid in taken] + (["--collect-only"] if run.broken else [])

        def select(resume: tuple[str, ...] | None) -> list[str]:
            return phase.selection(resume or paths, run.workers, deselect + run.extra)

        args_ = select(None)
        env = {**run.env, "HARNESS_PHASE": phase.name}
        command = [sys.executable, "-m", "pytest"]
        result = run_resuming(select, command, env, timeout, run.out, phase.name, [run.lock], run.quarantined)
    wall = time.time() - started
    entry = {"name": phase.name, "started": started, "wall_s": round(wall, 3), "args": args_, **result}
    entry["selected"] = count
    run.meta["phases"].append(entry)
    _write(run.out, run.meta)
    failed = phase_exit(result["exit_code"] or 0, timed_out=False)
    status = "timed out" if result["timed_out"] else ("failed" if failed else "ok")
    run.console.print(f"phase {phase.name}: {status} (exit {result['exit_code']}) in {wall:.1f} s")
    return entry


def _phases_tests(run: _Run) -> list[list[str]] | None:
    """Each phase's own tests in collection order (none an earlier phase takes; a shard's only): where a
    test may be first of its class or module. None where the collection failed."""
    if run.found is None or run.broken:
        return None
    tests = []
    for name, ids in run.found.items():
        kept = set(run.selected.get(name, [])) if run.split else set(ids) - set(run.earlier.get(name, []))
        tests.append([n for n in ids if n in kept])
    return tests


def _split(run: _Run, suite: Suite, shard: Shard, chosen: dict) -> None:
    """The run's one split, from its one collection: each phase's tests of this shard (``run.selected``)
    and what the shard records of it (phases.json's ``split``)."""
    if run.found is None:  # pytest could not collect the suite: no selection to split; each phase shows
        run.broken = True  # the collection error (--collect-only: nothing runs), a failed run (exit 1)
        return
    order = [phase.name for phase in suite.phases]
    earlier = {name: set(run.earlier.get(name, [])) for name in order}
    own = {name: [n for n in run.found.get(name, []) if n not in earlier[name]] for name in order}
    run.rootdir = Path(chosen["rootdir"]) if chosen.get("rootdir") else None
    run.selected, run.split = decide(shard, own, weights(run.weights, run.rootdir))
    run.meta["split"] = run.split
    _write(run.out, run.meta)


def _empty(phase, count: int | None, shard) -> str | None:
    """Why a phase starts no pytest, if it does not: no test of this shard, or no test selected."""
    if shard and count == 0:
        return f"shard {shard} has no tests for phase {phase.name}"
    if count == 0:
        return f"phase {phase.name} selects no test (of those collected once for the run): not started"
    return None


def _write(out: Path, meta: dict) -> None:
    """``phases.json``, without the credentials of the environment and of the command line (its pytest
    arguments are among the phases' ``args``)."""
    meta = Redactor(os.environ, sys.argv).data(meta)
    write_atomic(out / "phases.json", json.dumps(meta, indent=1) + "\n")


def _finish(out: Path, meta: dict, console, env: dict) -> bool | None:
    """The report written and the run's closing lines; whether this shard ran each test its split assigned
    it once (None: not a shard)."""
    table = Table(title=f"{meta['suite']} on {meta['platform']}")
    for column in ("phase", "exit", "wall s", "timed out"):
        table.add_column(column)
    for phase in meta["phases"]:
        timed_out = "yes" if phase["timed_out"] else ""
        table.add_row(phase["name"], str(phase["exit_code"]), f"{phase['wall_s']:.1f}", timed_out)
    console.print(table)
    report = finalize(out, env=env, baseline=meta.get("baseline"))
    kinds = report["starts"]["total"]["by_kind"]
    shown = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())) or "none"
    total = report["starts"]["total"]
    reused = total.get("reused", 0)
    avoided = f"; {reused} avoided by reuse ({total.get('saved_s', 0.0):.1f} s)" if reused else ""
    console.print(f"runner starts by kind: {shown}{avoided}")
    console.print(f"report: {escape(str(out / 'report.json'))}")
    outcomes: Counter[str] = Counter()
    for phase in report["phases"]:
        outcomes.update(phase.get("outcomes", {}))
    # the run's closing line, in the form CI log readers take for a test runner's
    print(
        f"harness: {outcomes['passed']} passed, {outcomes['failed'] + outcomes['error']} failed, "
        f"{outcomes['skipped']} skipped" + _cut_short(report)
    )
    accounting = account_shard(report) if meta.get("split") else None
    if accounting is None:
        return None
    where = f"shard {meta['shard']}"
    print(f"harness: {line(accounting, where)}")
    return bool(accounting["proven"])


def _cut_short(report: Report) -> str:
    """The closing line's tail: tests whose process died under them, and collected tests with no result."""
    crashed = [t["crash"] for t in report["tests"] if t.get("crash")]
    missing = sum(len(f["tests"]) for f in report["findings"] if f["type"] == "unaccounted")
    tail = f"; {len(crashed)} crashed ({'; '.join(crashed[:3])}{'; ...' if len(crashed) > 3 else ''})"
    return (tail if crashed else "") + (f"; {missing} collected without a result" if missing else "")
