"""pytest-shard's flags, balanced: ``--num-shards N --shard-id I`` keep this shard's tests, so a CI step
written for pytest-shard (vLLM's Buildkite steps) needs no edit.

After ``-m``/``-k`` and the harness's own order, the selected tests are cut into units that must stay
together (``harness.split.History``: a file whose module-scoped fixture started a runner, a class, a file's
tests of one engine configuration; a whole file without a report), weighed by recorded seconds
(``harness.split.weigh``) and spread longest first: ``harness.split.plan``, the split ``harness run``
makes of its one collection. Every shard computes the same split alone. An empty shard passes and says so.

The flags are honoured wherever pytest accepts them: also where the harness is installed but not acting
(the split is the same; nothing is recorded). A half pair, an id out of range or a count past
``harness.split.MAX_SHARDS`` is pytest's usage error, one line, before collection.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import split
from harness.config import options
from harness.errors import HarnessError

SHARD = pytest.StashKey[tuple[split.Shard, dict]]()  # this session's shard and what it records of its split


def requested(options: object) -> split.Shard | None:
    """``--num-shards``/``--shard-id`` (as pytest parsed them) as a shard, None when neither is given; a
    half pair, an id out of range or a count past the bound is a ``pytest.UsageError``."""
    try:
        return split.from_flags(getattr(options, "num_shards", None), getattr(options, "shard_id", None))
    except HarnessError as error:
        raise pytest.UsageError(str(error)) from None


def durations_path(config: pytest.Config) -> str | None:
    """``--harness-durations``, else ``HARNESS_DURATIONS_FROM``, else pytest-split's ``.test_durations``."""
    given = options.value(options.DURATIONS, config.getoption(options.DURATIONS.dest))
    if given:
        return given
    default = config.rootpath / ".test_durations"
    return str(default) if default.is_file() else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = requested(config.option)
    if shard is None:
        return
    path = durations_path(config)
    try:
        if path:  # the one loader of read-back files (its schema's types load only where a file is read)
            from harness.report.store import recorded  # noqa: PLC0415

            seconds, source, history = recorded(path)
        else:
            seconds, source, history = {}, "none", split.History()
    except HarnessError as error:
        raise pytest.UsageError(str(error)) from None
    described = f"{source} {Path(path).name}" if path else source
    made = split.plan([item.nodeid for item in items], shard.count, seconds, history)
    units = "history" if history.known else "file"
    record = made.record(shard, {"durations": described, "units": units})
    mine = set(record["assigned"])
    kept = [item for item in items if item.nodeid in mine]
    dropped = [item for item in items if item.nodeid not in mine]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept
    config.stash[SHARD] = (shard, {**record, "source": described})
    if not config.pluginmanager.has_plugin("harness.pytest_plugin.session"):
        return  # installed, not acting: the split is made, nothing is recorded
    from harness.pytest_plugin.session import process_context

    writer = process_context(config).writer
    if writer is not None and getattr(config, "workerinput", {}).get("workerid", "gw0") == "gw0":
        writer.write("shard", **config.stash[SHARD][1], phase=process_context(config).owner.phase)


def select(
    nodeids: list[str], count: int, index: int, seconds: dict[str, float], history: split.History
) -> tuple[set[str], float]:
    """Shard ``index`` of ``count``: its node ids and their predicted seconds (``harness.split.plan``)."""
    made = split.plan(nodeids, count, seconds, history)
    return set(made.shards[index]), made.predicted[index]


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    if SHARD not in config.stash:
        return None
    shard, record = config.stash[SHARD]
    return (
        f"harness: shard {shard}: {record['tests']} tests, predicted {record['predicted_s']:.0f} s "
        f"(durations: {record['source']}; groups that share an engine kept together)"
    )


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A shard the split left empty has nothing to fail: exit 0, not pytest's 5 (no tests collected)."""
    found = session.config.stash.get(SHARD, None)
    if found is not None and found[1]["tests"] == 0 and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"harness: shard {found[0]} is empty: nothing to run, exit 0")
