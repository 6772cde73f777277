"""pytest-shard's flags, balanced: ``--num-shards N --shard-id I`` keep this shard's tests, so a CI step
written for pytest-shard (vLLM's Buildkite steps) needs no edit.

After ``-m``/``-k`` and the harness's own order, the selected tests are cut into units that must stay
together (``harness.split.Groups``: a file whose module-scoped fixture started a runner, a class, a file's
tests of one engine configuration; a whole file without a report), weighed by recorded seconds
(``harness.split.weigh``) and spread longest first: ``harness.report.previous.History.plan``, the split
``harness run`` makes of its one collection. Every shard computes the same split alone. An empty shard
passes and says so.

The flags are honoured wherever pytest accepts them: also where the harness is installed but not acting
(the split is the same; nothing is recorded). A half pair, an id out of range or a count past
``harness.split.MAX_SHARDS`` is pytest's usage error, one line, before collection.
"""

from __future__ import annotations

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
        if path:  # the one previous run, through the one loader (its types load only where a file is read)
            from harness.report.previous import durations  # noqa: PLC0415

            history = durations(path)
        else:
            from harness.report.previous import History  # noqa: PLC0415

            history = History()
    except HarnessError as error:
        raise pytest.UsageError(str(error)) from None
    made = history.plan([item.nodeid for item in items], shard.count, files=False)
    units = history.units(files=False)
    record = made.record(shard, {"durations": history.described, "units": units})
    described = history.described
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
