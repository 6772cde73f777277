"""Split a phase's test files across CI jobs (``--shard i/N``).

A whole file is the unit: its module-scoped engine would start once per shard it landed in. Every job of a
build computes the same split on its own, so the split depends only on the file paths (relative, POSIX) and
the recorded durations, never on the input order, ``PYTHONHASHSEED`` or the checkout's location.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from harness import split
from harness.config.suites import Suite
from harness.config.variables import SENSITIVE
from harness.errors import HarnessError, ReportError
from harness.report.build import files
from harness.report.store import load

MAX_SHARDS = 1024  # far more CI jobs than any build runs; a bigger N is a typo
TEST_FILES = ("test_*.py", "*_test.py")  # pytest's default python_files, for sharding by file


def parse_shard(spec: str | None, env: Mapping[str, str] = os.environ) -> tuple[int, int] | None:
    """``"i/N"`` (0-based) → ``(i, N)``; with no spec, Buildkite's parallel-job variables fill it."""
    source = "--shard"
    if spec is None:
        job, jobs = env.get("BUILDKITE_PARALLEL_JOB"), env.get("BUILDKITE_PARALLEL_JOB_COUNT")
        if job is None and jobs is None:
            return None
        if job is None or jobs is None:
            missing = "BUILDKITE_PARALLEL_JOB" if job is None else "BUILDKITE_PARALLEL_JOB_COUNT"
            raise HarnessError(f"{missing} is not set but its partner is; cannot pick a shard")
        spec, source = f"{job}/{jobs}", "BUILDKITE_PARALLEL_JOB/BUILDKITE_PARALLEL_JOB_COUNT"
    parsed = split.shard_of(spec)
    if parsed is None:
        raise HarnessError(
            f"{source} {spec!r} is not 'i/N' with whole numbers of up to 6 digits (0-based i, e.g. 0/4)"
        )
    index, count = parsed
    if count > MAX_SHARDS:
        raise HarnessError(f"{source} {spec!r}: N may be at most {MAX_SHARDS}")
    if count < 1 or index >= count:
        raise HarnessError(f"{source} {spec!r} is out of range: need 0 <= i < N and N >= 1")
    return index, count


def durations_from(path: str | os.PathLike[str]) -> dict[str, float]:
    """File → seconds it took last time, from a ``report.json`` or the run directory holding one.

    A file's seconds are its tests' setup, call and teardown, so the runner starts its fixtures made are in.
    """
    report = load(Path(path))
    try:
        return {_key(file): float(entry["wall_s"]) for file, entry in files(report["tests"]).items()}
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise ReportError(f"{path}: a test entry lacks a usable file or duration ({error!r})") from None


def configurations_from(path: str | os.PathLike[str]) -> dict[str, str]:
    """Node id → fingerprint of the first vLLM configuration the test itself started or was handed warm,
    or ``reuse-sensitive`` for a test that failed on a handed-on engine and passed on fresh ones.

    Starts made by a wider-scoped fixture are left out: ordering tests cannot move those.
    """
    report = load(Path(path))
    try:
        owned = [
            (event.get("start", event.get("t")), event["test"], event["fingerprint"])
            for event in [*report["records"], *report.get("reuses", [])]
            if event.get("kind") == "vllm" and event.get("test") and event.get("scope") in (None, "function")
        ]
    except (KeyError, TypeError, AttributeError) as error:
        raise ReportError(f"{path}: a runner record lacks a usable test or fingerprint ({error!r})") from None
    for when, test, key in owned:
        if not (isinstance(when, int | float) and not isinstance(when, bool) and isinstance(key, str)):
            raise ReportError(
                f"{path}: a runner record of {str(test)[:80]!r} has start {str(when)[:40]!r} "
                f"and fingerprint {str(key)[:40]!r}: expected a time and a text"
            )
    first: dict[str, str] = {}
    for _, test, key in sorted(owned, key=lambda entry: entry[0] or 0.0):
        first.setdefault(test, key)
    for finding in report.get("findings", []):  # failed on a handed-on engine: fresh engines next time
        test = finding.get("test") if isinstance(finding, dict) else None
        if isinstance(test, str) and finding.get("type") == SENSITIVE:
            first[test] = SENSITIVE
    return first


def assign(files: Iterable[str], count: int, durations: Mapping[str, float] | None = None) -> list[list[str]]:
    """Split ``files`` into ``count`` shards, each file in exactly one (``harness.split.assign``, the split
    ``--num-shards`` makes of groups of tests): by their recorded seconds, keyed by the path every job agrees
    on; each shard keeps the files in the order given, so pytest still runs them in collection order."""
    ordered = list(dict.fromkeys(files))
    keys = {file: _key(file) for file in ordered}
    by_key = split.assign(keys.values(), count, durations)
    owner = {key: shard for shard, found in enumerate(by_key) for key in found}
    shards: list[list[str]] = [[] for _ in range(count)]
    for file in ordered:
        shards[owner[keys[file]]].append(file)
    return shards


def _key(file: str) -> str:
    """The path every job agrees on: relative to the working directory, POSIX, no ``./``."""
    path = Path(file)
    if path.is_absolute():
        try:
            path = path.relative_to(Path.cwd())
        except ValueError:
            pass
    return PurePosixPath(path.as_posix()).as_posix()


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
    mine = _mine(suite, shard, durations)
    return {phase.name: tuple(f for f in mine if _under(f, phase.paths)) for phase in suite.phases}


def predicted(suite: Suite, shard: tuple[int, int], durations: dict | None) -> float | None:
    """The recorded seconds of this shard's files (None without durations): what the split expects."""
    if not durations:
        return None
    files = _mine(suite, shard, durations)
    known = [durations[_key(f)] for f in files if _key(f) in durations]
    median = statistics.median(durations.values())
    return round(sum(known) + median * (len(files) - len(known)), 3)


def _mine(suite: Suite, shard: tuple[int, int], durations: dict | None) -> list[str]:
    files = test_files(tuple(dict.fromkeys(p for phase in suite.phases for p in phase.paths)))
    return assign(files, shard[1], durations)[shard[0]]
