"""Suites and their ordered phases (``[tool.harness.suites.<name>]``), and ``harness run``.

A phase is one ``python -m pytest`` process, so the memory a phase's runners held is given back (the
process is gone) before the next phase starts, whatever the tests leaked. Phases run in order and the run
goes on after a failing one unless ``--fail-fast``; the exit code is the worst phase's, where pytest's 5
(nothing collected: a shard or selection with no tests) counts as success.

A suite table gives ``paths`` and, optionally, ``phases`` (an array of tables). Without ``phases`` the
default shape applies: ``shared-engine`` (tests sharing class/module-scoped engines, one worker per GPU,
``loadscope`` keeps a scope on one worker) → ``standalone`` (tests that build their own runners,
``loadfile``) → ``multi-gpu`` (``gpus(n)`` tests, serially, with every device visible).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from harness.errors import ConfigError, HarnessError

WORKERS = ("per-gpu", "serial")
DISTS = ("loadscope", "loadfile")
NO_TESTS = 5  # pytest.ExitCode.NO_TESTS_COLLECTED, without importing pytest into the CLI
INTERRUPT_GRACE_S = 10.0  # after a phase timeout: SIGINT lets pytest write its JUnit, then SIGKILL
TEST_FILES = ("test_*.py", "*_test.py")  # pytest's default python_files, for sharding by file


@dataclass(frozen=True)
class Phase:
    name: str
    paths: tuple[str, ...]
    markers: str | None = None
    keywords: str | None = None
    workers: str | int = "per-gpu"
    dist: str = "loadscope"
    timeout_s: float | None = None

    def selection(self, paths: tuple[str, ...] | None = None) -> list[str]:
        """pytest arguments choosing this phase's tests and workers (``paths`` replaces the phase's own)."""
        args = list(self.paths if paths is None else paths)
        if self.markers:
            args += ["-m", self.markers]
        if self.keywords:
            args += ["-k", self.keywords]
        if self.workers == "serial":
            return args + ["-n", "0"]
        count = "auto" if self.workers == "per-gpu" else str(self.workers)
        return args + ["-n", count, "--dist", self.dist]


@dataclass(frozen=True)
class Suite:
    name: str
    phases: tuple[Phase, ...] = field(default_factory=tuple)


def default_phases(paths: tuple[str, ...]) -> tuple[Phase, ...]:
    return (
        Phase("shared-engine", paths, markers="not standalone and not gpus", dist="loadscope"),
        Phase("standalone", paths, markers="standalone and not gpus", dist="loadfile"),
        Phase("multi-gpu", paths, markers="gpus", workers="serial"),
    )


_SUITE_KEYS = {"paths", "phases"}
_PHASE_KEYS = {"name", "paths", "markers", "keywords", "workers", "dist", "timeout_s"}


def _paths(where: str, value) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(p, str) and p for p in value):
        raise ConfigError(f"{where} paths: expected a non-empty list of strings, got {value!r}")
    return tuple(value)


def _phase(where: str, table, suite_paths: tuple[str, ...] | None) -> Phase:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table, got {table!r}")
    unknown = sorted(set(table) - _PHASE_KEYS)
    if unknown:
        raise ConfigError(f"{where} {unknown[0]}: unknown key (known: {', '.join(sorted(_PHASE_KEYS))})")
    name = table.get("name")
    if not isinstance(name, str) or not name or "/" in name:
        raise ConfigError(f"{where} name: expected a non-empty string without '/', got {name!r}")
    where = f"{where.rsplit(' ', 1)[0]} phase {name!r}"
    if "paths" in table:
        paths = _paths(where, table["paths"])
    elif suite_paths is None:
        raise ConfigError(f"{where} paths: missing (give it here or in the suite table)")
    else:
        paths = suite_paths
    for key in ("markers", "keywords"):
        if key in table and not (isinstance(table[key], str) and table[key].strip()):
            raise ConfigError(f"{where} {key}: expected a non-empty string, got {table[key]!r}")
    workers = table.get("workers", "per-gpu")
    if not (workers in WORKERS or (type(workers) is int and workers >= 1)):
        raise ConfigError(f"{where} workers: expected 'per-gpu', 'serial' or an integer ≥ 1, got {workers!r}")
    dist = table.get("dist", "loadscope")
    if dist not in DISTS:
        raise ConfigError(f"{where} dist: expected one of {', '.join(DISTS)}, got {dist!r}")
    timeout = table.get("timeout_s")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise ConfigError(f"{where} timeout_s: expected a number > 0, got {timeout!r}")
    return Phase(
        name,
        paths,
        table.get("markers"),
        table.get("keywords"),
        workers,
        dist,
        None if timeout is None else float(timeout),
    )


def parse_suite(name: str, table) -> Suite:
    """One ``[tool.harness.suites.<name>]`` table → ``Suite``; a ``ConfigError`` names suite, phase, key."""
    where = f"[tool.harness.suites.{name}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table, got {table!r}")
    unknown = sorted(set(table) - _SUITE_KEYS)
    if unknown:
        raise ConfigError(f"{where} {unknown[0]}: unknown key (known: {', '.join(sorted(_SUITE_KEYS))})")
    paths = _paths(where, table["paths"]) if "paths" in table else None
    if "phases" not in table:
        if paths is None:
            raise ConfigError(f"{where} paths: missing (needed for the default phases)")
        return Suite(name, default_phases(paths))
    phases = table["phases"]
    if not isinstance(phases, list) or not phases:
        raise ConfigError(f"{where} phases: expected a non-empty array of tables, got {phases!r}")
    parsed = tuple(_phase(f"{where} phases[{i}]", phase, paths) for i, phase in enumerate(phases))
    names = [phase.name for phase in parsed]
    repeated = next((n for n in names if names.count(n) > 1), None)
    if repeated:
        raise ConfigError(f"{where} phase {repeated!r}: the name is used twice")
    return Suite(name, parsed)


def load_suite(harness_table: dict, name: str, only: list[str] | None = None) -> Suite:
    """The named suite from ``[tool.harness]``, restricted to ``only`` phases (kept in suite order)."""
    suites = harness_table.get("suites", {})
    if not isinstance(suites, dict):
        raise ConfigError("[tool.harness] suites: expected tables [tool.harness.suites.<name>]")
    if name not in suites:
        known = ", ".join(sorted(suites)) or "none declared"
        raise HarnessError(f"unknown suite {name!r} (known: {known})")
    suite = parse_suite(name, suites[name])
    if not only:
        return suite
    names = [phase.name for phase in suite.phases]
    unknown = [n for n in only if n not in names]
    if unknown:
        raise HarnessError(f"suite {name!r} has no phase {unknown[0]!r} (phases: {', '.join(names)})")
    return Suite(name, tuple(p for p in suite.phases if p.name in only))


def worst(exit_codes: list[int]) -> int:
    """The run's exit code: the worst phase's, where 5 (no tests collected) is not a failure."""
    return max((0 if code == NO_TESTS else code for code in exit_codes), default=0)


def test_files(paths: tuple[str, ...]) -> list[str]:
    """Test files under ``paths`` (files as given, directories searched), POSIX and sorted: shard units."""
    found: list[str] = []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(
                PurePosixPath(p).as_posix() for pattern in TEST_FILES for p in path.rglob(pattern)
            )
        else:
            found.append(PurePosixPath(path).as_posix())
    return list(dict.fromkeys(found))


def _under(file: str, paths: tuple[str, ...]) -> bool:
    return any(file == p or file.startswith(p + "/") for p in (PurePosixPath(q).as_posix() for q in paths))


def shard_paths(suite: Suite, shard: tuple[int, int], durations: dict | None) -> dict[str, tuple[str, ...]]:
    """Per phase, the files of this shard: the whole suite's files are split once, so every phase of a
    shard job runs the same files and a file's engines start in one job only."""
    from harness.shards import assign

    files = test_files(tuple(dict.fromkeys(p for phase in suite.phases for p in phase.paths)))
    mine = assign(files, shard[1], durations)[shard[0]]
    return {phase.name: tuple(f for f in mine if _under(f, phase.paths)) for phase in suite.phases}


def run_phase(command: list[str], env: dict, timeout_s: float | None) -> tuple[int, bool]:
    """Run one phase in its own process group; on timeout interrupt it, then kill the whole group."""
    process = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        return _exit_code(process.wait(timeout=timeout_s)), False
    except subprocess.TimeoutExpired:
        pass
    except KeyboardInterrupt:
        _stop(process)
        raise
    _stop(process)
    return _exit_code(process.returncode), True


def _stop(process: subprocess.Popen) -> None:
    """SIGINT first (pytest writes its JUnit and summary), SIGKILL for whatever is left of the group."""
    try:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=INTERRUPT_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)  # engine subprocesses outlive their pytest otherwise
    except ProcessLookupError:
        pass
    process.wait()


def _exit_code(returncode: int) -> int:
    """A process ended by a signal reads as the shell writes it (128 + signal number)."""
    return 128 - returncode if returncode < 0 else returncode


def main(args) -> int:
    """``harness run SUITE``: the suite's phases in order, one pytest process each; see the module doc."""
    from rich.console import Console

    from harness.config import find_pyproject, load_settings, read_table
    from harness.platform import detect
    from harness.shards import durations_from, parse_shard

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
    import shutil

    for name in ("ledger", "junit"):
        shutil.rmtree(out / name, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)


def _write(out: Path, meta: dict) -> None:
    from harness.report import write_atomic

    write_atomic(out / "phases.json", json.dumps(meta, indent=1) + "\n")


def _finish(out: Path, meta: dict, console, env: dict) -> None:
    from rich.table import Table

    from harness.report import finalize

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
