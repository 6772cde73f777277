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

from harness.config import options
from harness.config.pyproject import declares_table, find_pyproject
from harness.config.variables import CONFIGURATIONS, GPU_FREE_TESTS, SWITCH
from harness.errors import HarnessError
from harness.select import SELECTION

__all__ = ["SWITCH", "asked"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harness")  # the options with a variable or a key: declared in config.options
    options.add_arguments(group, options.HARNESS)
    group.addoption("--no-harness", action="store_true", help="do not act, even where asked")
    options.add_arguments(group, options.LEDGER_DIR)
    group.addoption(
        "--harness-phases",
        default=None,
        metavar="FILE",
        help="with --collect-only: write each phase's node ids into FILE's phase list (harness run)",
    )
    options.add_arguments(group, options.REUSE)
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
    options.add_arguments(group, options.DURATIONS)


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
    given = config.known_args_namespace
    if given.no_harness:
        return False
    if options.value(options.HARNESS, given.harness, env):  # --harness, else HARNESS=1
        return True
    try:
        return declares_table(find_pyproject(config.rootpath))
    except HarnessError as error:
        raise pytest.UsageError(str(error)) from None


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    _rootdir_kept(early_config)
    given = early_config.known_args_namespace
    sharded = getattr(given, "num_shards", None) is not None or getattr(given, "shard_id", None) is not None
    # harness run's one collection (--harness-phases) sees every test: the run splits what it collected
    if sharded and not _pytest_shard() and not given.harness_phases:
        from harness.pytest_plugin import shard

        shard.requested(given)  # a half pair or an id out of range: one line before any conftest
        early_config.pluginmanager.register(shard, shard.__name__)  # acting or not: never ignored
    if not asked(early_config):
        return  # a session that did not ask imports none of the modules below
    from harness.pytest_plugin import (
        classes,
        fixtures,
        footprint,
        gpus,
        pinning,
        quarantined,
        recorder,
        retries,
        session,
        terminal,
        timeouts,
    )

    # pinning last of those with a first-called configure: a worker's mask is set before anything builds
    # the session's context (pluggy calls the last registered first)
    for module in (
        session,
        timeouts,
        gpus,
        quarantined,
        classes,
        pinning,
        recorder,
        retries,
        fixtures,
        terminal,
        footprint,
    ):
        early_config.pluginmanager.register(module, module.__name__)
    if sharded and _pytest_shard():  # its flags, its split: said once, in the header
        early_config.pluginmanager.register(_Aside(), "harness-shard-aside")
    if os.environ.get(CONFIGURATIONS):  # harness run --durations-from: ordered by a previous run
        from harness.pytest_plugin import order

        early_config.pluginmanager.register(order, order.__name__)
    if os.environ.get(SELECTION):  # harness run --changed-since: the tests its selection leaves out
        from harness.pytest_plugin import selected

        early_config.pluginmanager.register(selected.load(os.environ[SELECTION]), selected.__name__)
    if os.environ.get(GPU_FREE_TESTS):  # [tool.harness.ci] gpu_free_job: a GPU step's or the CPU job's list
        from harness.pytest_plugin import cpu_job

        early_config.pluginmanager.register(cpu_job.load(), cpu_job.__name__)


def _rootdir_kept(config: pytest.Config) -> None:
    """``--harness-durations PATH`` (a separate argument): pytest chooses its rootdir before any plugin's
    options are known, so it took PATH for a test path; where that moved the rootdir (a file outside the
    project), the session is refused in one line instead of running from the wrong root."""
    args = [str(arg) for arg in config.invocation_params.args]
    if "--harness-durations" not in args[:-1]:
        return
    from _pytest.config.findpaths import determine_setup  # pytest's own rule, given the right arguments

    options = config.known_args_namespace
    try:
        rootpath = determine_setup(
            inifile=options.inifilename,
            override_ini=options.override_ini,
            args=list(options.file_or_dir),
            rootdir_cmd_arg=options.rootdir or None,
            invocation_dir=config.invocation_params.dir,
        )[0]
    except Exception:  # another pytest's signature: nothing to compare with
        return
    if rootpath != config.rootpath:
        path = args[args.index("--harness-durations") + 1]
        raise pytest.UsageError(
            f"--harness-durations {path}: pytest took {path} for a test path and moved its rootdir to "
            f"{config.rootpath} (from {rootpath}); write --harness-durations={path}"
        )


class _Aside:
    def pytest_report_header(self) -> str:
        return (
            "harness: pytest-shard owns --num-shards/--shard-id here (a hash of node ids); without it the "
            "harness balances shards by recorded durations and keeps tests that share an engine together"
        )
