"""The entry point (``pytest11``: ``harness``): the options, and whether the harness acts in this session.

Installed in an image, the plugin loads into every pytest run there. It acts (worker pinning, timeouts,
the vLLM/HF patches, the ledger) only when asked: under ``harness run`` (which sets ``HARNESS=1``), with
``--harness``, with ``HARNESS=1``, or when the project's pyproject has a ``[tool.harness]`` table.
Otherwise it registers nothing else and the run is plain pytest. ``-p no:harness`` blocks it entirely,
``--no-harness`` turns it off where it would act.

The decision is taken in ``pytest_load_initial_conftests``: the options and rootdir are known there, and
it comes before ``pytest_cmdline_main``, where xdist asks for ``-n auto``'s worker count.
"""

from __future__ import annotations

import os

import pytest

from harness.config.pyproject import declares_table, find_pyproject
from harness.config.variables import CONFIGURATIONS, SWITCH
from harness.errors import HarnessError

__all__ = ["SWITCH", "asked"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harness")
    group.addoption(
        "--harness",
        action="store_true",
        help="act in this session (as HARNESS=1 or a [tool.harness] table in pyproject.toml do)",
    )
    group.addoption("--no-harness", action="store_true", help="do not act, even where asked")
    group.addoption(
        "--harness-ledger-dir",
        default=None,
        help="directory for the runner ledger, one <worker>.jsonl per worker "
        "(default: $HARNESS_LEDGER_DIR, else a new temporary directory)",
    )
    group.addoption(
        "--harness-phases",
        default=None,
        metavar="FILE",
        help="with --collect-only: write each phase's node ids into FILE's phase list (harness run)",
    )
    group.addoption(
        "--harness-reuse",
        action="store_true",
        help="keep a closed VllmRunner's engine warm for the next start of its configuration "
        "([tool.harness] reuse = true)",
    )
    if not _pytest_shard():  # with it installed, its own options (and its hash split) stand
        group.addoption(
            "--num-shards",
            type=int,
            default=None,
            help="pytest-shard's: split the selected tests into N shards, balanced by recorded durations, "
            "tests sharing an engine kept together (where the harness acts)",
        )
        group.addoption(
            "--shard-id", type=int, default=None, help="pytest-shard's: the shard to run, 0-based"
        )
    group.addoption(
        "--harness-durations",
        default=None,
        metavar="PATH",
        help="durations for --num-shards: a report.json or run directory, a JUnit XML file or pytest-split's "
        ".test_durations (default: $HARNESS_DURATIONS_FROM, else .test_durations in the rootdir)",
    )


def _pytest_shard() -> bool:
    """Whether pytest-shard is installed: then it owns ``--num-shards`` and ``--shard-id``."""
    from importlib import metadata

    try:
        metadata.distribution("pytest-shard")
    except metadata.PackageNotFoundError:
        return False
    return True


def asked(config: pytest.Config, env=os.environ) -> bool:
    """Whether this session asked for the harness (see the module's docstring)."""
    options = config.known_args_namespace
    if options.no_harness:
        return False
    if options.harness or env.get(SWITCH) == "1":
        return True
    try:
        return declares_table(find_pyproject(config.rootpath))
    except HarnessError as error:
        raise pytest.UsageError(str(error)) from None


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    if not asked(early_config):
        return  # a session that did not ask imports none of the modules below
    from harness.pytest_plugin import fixtures, gpus, pinning, recorder, session, summary, timeouts

    # pinning last of those with a first-called configure: a worker's mask is set before anything builds
    # the session's context (pluggy calls the last registered first)
    for module in (session, timeouts, gpus, pinning, recorder, fixtures, summary):
        early_config.pluginmanager.register(module, module.__name__)
    if getattr(early_config.known_args_namespace, "num_shards", None) is not None:
        from harness.pytest_plugin import shard

        if _pytest_shard():  # its flags, its split: said once, in the header
            early_config.pluginmanager.register(_Aside(), "harness-shard-aside")
        else:
            early_config.pluginmanager.register(shard, shard.__name__)
    if os.environ.get(CONFIGURATIONS):  # harness run --durations-from: ordered by a previous run
        from harness.pytest_plugin import order

        early_config.pluginmanager.register(order, order.__name__)


class _Aside:
    def pytest_report_header(self) -> str:
        return (
            "harness: pytest-shard owns --num-shards/--shard-id here (a hash of node ids); without it the "
            "harness balances shards by recorded durations and keeps tests that share an engine together"
        )
