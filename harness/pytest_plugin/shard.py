"""pytest-shard's flags, balanced: ``--num-shards N --shard-id I`` keep this shard's tests, so a CI step
written for pytest-shard (vLLM's Buildkite steps) needs no edit.

After ``-m``/``-k`` and the harness's own order, the selected tests are cut into units that must stay
together (``harness.split.History``: a file whose module-scoped fixture started a runner, a class, a file's
tests of one engine configuration; a whole file without a report), weighed by recorded seconds (a test
without a record weighs its file's median, else the median of all, else one second), and spread longest
first (``harness.split.assign``, the split ``harness run --shard`` makes of files). Every shard computes
the same split alone. An empty shard passes and says so.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest

from harness import split
from harness.errors import HarnessError
from harness.pytest_plugin.session import process_context

SHARD = pytest.StashKey[tuple[int, int, int, float, str]]()  # index, count, tests, predicted s, source
DEFAULT_S = 1.0


def durations_path(config: pytest.Config) -> str | None:
    """``--harness-durations``, else ``HARNESS_DURATIONS_FROM``, else pytest-split's ``.test_durations``."""
    given = config.getoption("harness_durations") or os.environ.get("HARNESS_DURATIONS_FROM")
    if given:
        return given
    default = config.rootpath / ".test_durations"
    return str(default) if default.is_file() else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    count, index = config.getoption("num_shards"), config.getoption("shard_id")
    if count is None or count < 1 or index is None or not 0 <= index < count:
        raise pytest.UsageError(f"--num-shards {count} --shard-id {index}: need N >= 1 and 0 <= id < N")
    path = durations_path(config)
    try:
        seconds, source, history = split.recorded(path) if path else ({}, "none", split.History())
    except HarnessError as error:
        raise pytest.UsageError(str(error)) from None
    mine, predicted = select([item.nodeid for item in items], count, index, seconds, history)
    kept = [item for item in items if item.nodeid in mine]
    dropped = [item for item in items if item.nodeid not in mine]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept
    described = f"{source} {Path(path).name}" if path else source
    config.stash[SHARD] = (index, count, len(kept), predicted, described)
    writer = process_context(config).writer
    if writer is not None and getattr(config, "workerinput", {}).get("workerid", "gw0") == "gw0":
        writer.write(
            "shard",
            index=index,
            count=count,
            tests=len(kept),
            predicted_s=round(predicted, 3),
            source=described,
            phase=process_context(config).owner.phase,
        )


def select(
    nodeids: list[str], count: int, index: int, seconds: dict[str, float], history: split.History
) -> tuple[set[str], float]:
    """Shard ``index`` of ``count``: its node ids and their predicted seconds."""
    units: dict[str, list[str]] = {}
    for nodeid in nodeids:
        units.setdefault(history.unit(nodeid), []).append(nodeid)
    weight = _weights(nodeids, seconds)
    weights = {unit: sum(weight[n] for n in members) for unit, members in units.items()}
    mine = split.assign(units, count, weights)[index]
    return {n for unit in mine for n in units[unit]}, sum(weights[unit] for unit in mine)


def _weights(nodeids: list[str], seconds: dict[str, float]) -> dict[str, float]:
    """Each test's recorded seconds (by node id, or JUnit's ``classname::name``); without a record, its
    file's median, else the median of all, else ``DEFAULT_S``."""
    found = {n: seconds.get(n, seconds.get(split.junit_key(n))) for n in nodeids}
    by_file: dict[str, list[float]] = {}
    for nodeid, value in found.items():
        if value is not None:
            by_file.setdefault(nodeid.split("::")[0], []).append(value)
    known = [v for v in found.values() if v is not None]
    overall = statistics.median(known) if known else DEFAULT_S
    files = {file: statistics.median(values) for file, values in by_file.items()}
    return {
        nodeid: value if value is not None else files.get(nodeid.split("::")[0], overall)
        for nodeid, value in found.items()
    }


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    if SHARD not in config.stash:
        return None
    index, count, tests, predicted, source = config.stash[SHARD]
    return (
        f"harness: shard {index}/{count}: {tests} tests, predicted {predicted:.0f} s "
        f"(durations: {source}; groups that share an engine kept together)"
    )


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A shard the split left empty has nothing to fail: exit 0, not pytest's 5 (no tests collected)."""
    shard = session.config.stash.get(SHARD, None)
    if shard is not None and shard[2] == 0 and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"harness: shard {shard[0]}/{shard[1]} is empty: nothing to run, exit 0")
