"""``harness run SUITE``: the suite's phases in order, one pytest process each.

A phase is one ``python -m pytest`` process, so the memory a phase's runners held is given back (the
process is gone) before the next phase starts, whatever the tests leaked. Phases run in order and the run
goes on after a failing one unless ``--fail-fast``; the exit code is the worst phase's, where pytest's 5
(nothing collected: a shard or selection with no tests) counts as success.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from harness.config.pyproject import find_pyproject, read_table
from harness.config.settings import load_settings
from harness.config.suites import load_suite
from harness.errors import HarnessError
from harness.platform import detect
from harness.pytest_plugin.plugin import SWITCH
from harness.report.finalize import finalize
from harness.report.outcomes import NO_TESTS, worst
from harness.report.store import write_atomic
from harness.run.process import run_phase
from harness.run.shards import durations_from, parse_shard, shard_paths


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
    suite = load_suite(read_table(pyproject), args.suite, args.phases)
    shard = parse_shard(args.shard, env)
    if args.durations_from and shard is None:
        raise HarnessError("--durations-from only orders files for --shard; give --shard I/N as well")
    # CI reaches pytest through `nox -s X -- args`, so the history can also come from the environment.
    history = args.durations_from or (env.get("HARNESS_DURATIONS_FROM") if shard else None)
    durations = durations_from(history) if history else None
    selected = shard_paths(suite, shard, durations) if shard else {}
    extra = list(args.pytest_args or [])

    out = Path(args.out or f"harness-out/{suite.name}-{platform}")
    _fresh(out)
    meta = {
        "suite": suite.name,
        "platform": platform,
        "platform_reason": detection.reason,
        "shard": f"{shard[0]}/{shard[1]}" if shard else None,
        "started": time.time(),
        "phases": [],
    }
    _write(out, meta)
    console = Console()
    console.print(f"[bold]harness run {suite.name}[/] on {platform} ({detection.reason}) → {out}")
    env["HARNESS_PLATFORM"] = platform  # every phase's pytest agrees with this run's platform
    env[SWITCH] = "1"  # the plugin acts in every phase, whether or not the suite's pyproject asks
    for number, phase in enumerate(suite.phases, 1):
        console.rule(f"phase {number}/{len(suite.phases)}: {phase.name}")
        paths = selected.get(phase.name) if shard else None
        args_ = phase.selection(paths) + [
            f"--junitxml={out / 'junit' / f'{phase.name}.xml'}",
            f"--harness-ledger-dir={out / 'ledger' / phase.name}",
            *extra,
        ]
        started = time.time()
        if shard and not paths:
            console.print(f"shard {meta['shard']} has no files for phase {phase.name}")
            code, timed_out, args_ = NO_TESTS, False, []
        else:
            timeout = phase.timeout_s if phase.timeout_s is not None else settings.phase_timeout_s
            code, timed_out = run_phase(
                [sys.executable, "-m", "pytest", *args_], {**env, "HARNESS_PHASE": phase.name}, timeout
            )
        wall = time.time() - started
        meta["phases"].append(
            {
                "name": phase.name,
                "started": started,
                "wall_s": round(wall, 3),
                "exit_code": code,
                "args": args_,
                "timed_out": timed_out,
            }
        )
        _write(out, meta)
        status = "timed out" if timed_out else ("ok" if worst([code]) == 0 else "failed")
        console.print(f"phase {phase.name}: {status} (exit {code}) in {wall:.1f} s")
        if args.fail_fast and worst([code]):
            console.print(f"--fail-fast: stopping after phase {phase.name}")
            break
    result = worst([p["exit_code"] for p in meta["phases"]])
    _finish(out, meta, console, env)
    return result


def _fresh(out: Path) -> None:
    """A run directory holds one run: earlier ledgers and JUnit files would merge into this report."""
    for name in ("ledger", "junit"):
        shutil.rmtree(out / name, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)


def _write(out: Path, meta: dict) -> None:
    write_atomic(out / "phases.json", json.dumps(meta, indent=1) + "\n")


def _finish(out: Path, meta: dict, console, env: dict) -> None:
    table = Table(title=f"{meta['suite']} on {meta['platform']}")
    for column in ("phase", "exit", "wall s", "timed out"):
        table.add_column(column)
    for phase in meta["phases"]:
        timed_out = "yes" if phase["timed_out"] else ""
        table.add_row(phase["name"], str(phase["exit_code"]), f"{phase['wall_s']:.1f}", timed_out)
    console.print(table)
    report = finalize(out, env=env)
    kinds = report["starts"]["total"]["by_kind"]
    shown = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())) or "none"
    console.print(f"runner starts by kind: {shown}")
    console.print(f"report: {out / 'report.json'}")
    outcomes = Counter()
    for phase in report["phases"]:
        outcomes.update(phase.get("outcomes", {}))
    # the run's closing line, in the form CI log readers take for a test runner's
    print(
        f"harness: {outcomes['passed']} passed, {outcomes['failed'] + outcomes['error']} failed, "
        f"{outcomes['skipped']} skipped"
    )
