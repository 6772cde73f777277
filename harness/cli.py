"""The ``harness`` command: argument parsing only; each subcommand lives in the module of its role.

Every subcommand module exposes ``main(args) -> int``. A ``HarnessError`` becomes one line on stderr and
exit 2, so bad input never shows a traceback; any other exception is the harness's own fault: its
traceback, then one line, and exit 4 (never 1, which CI reads as failed tests).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from harness import __version__
from harness.config import options
from harness.errors import HarnessError
from harness.platform import PLATFORMS

MAX_ERROR_CHARS = 500  # an error line quoting a 100 KB value would bury the log: cut it
BAD_INPUT, FAULT = 2, 4  # harness.run.exits; docs/exit-codes.md
RUN_EXIT_CODES = """exit codes:
  0        passed (a phase with no tests collected is not a failure)
  1        tests failed: a failed or errored test, a collection error, a crashed test worker
  2        bad input: settings, arguments, paths (one line on stderr says which)
  3        a phase stopped at its timeout
  4        harness fault: an internal error, pytest's INTERNALERROR, a phase that could not start,
           a report the disk could not take
  128+N    stopped by signal N (after the report is written)
"""
COMPARE_EXIT_CODES = """exit codes:
  0        no regression
  1        a --fail-on-regression gate tripped
  2        bad input: a missing or malformed report, a bad gate
"""
MERGE_EXIT_CODES = """exit codes:
  0        merged: every test of the selection ran once, in one shard; no gate tripped
  1        merged and written, but a test ran in no shard or in two (named), or a gate tripped
  2        bad input: shards not of one split, suite, platform or commit, a shard twice or missing
"""


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as the harness's one line (argparse prints usage on a second)."""

    def error(self, message: str):
        _print_error(f"{self.prog}: {message}")
        sys.exit(2)


def _print_error(message: str) -> None:
    line = " ".join(message.split())  # one line, whatever the message held
    if len(line) > MAX_ERROR_CHARS:
        line = f"{line[:MAX_ERROR_CHARS]}... ({len(line)} characters, cut)"
    print(f"harness: error: {line}", file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="harness", description="CI harness for GPU model test suites.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser("doctor", help="platform, devices, memory, versions and fitting nox sessions")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.set_defaults(module="harness.doctor")
    _add_run(sub)
    report = sub.add_parser("report", help="(re)write the report files of a run directory")
    report.add_argument("run_dir", help="a run directory that harness run wrote")
    report.set_defaults(module="harness.report.finalize")
    _add_compare(sub)
    _add_ci(sub)
    _add_flaky(sub)
    selection = sub.add_parser("selection", help="selection rate and false-green rate across builds' reports")
    selection.add_argument("reports", nargs="+", metavar="REPORT", help="report.json files or run dirs")
    selection.set_defaults(module="harness.run.selecting")
    return parser


def _add_flaky(sub) -> None:
    flaky = sub.add_parser(
        "flaky",
        help="the flaky tests of recent builds' reports, by vLLM's quarantine rule, as its quarantine file",
    )
    flaky.add_argument("reports", nargs="+", help="reports (report.json or run directories) of recent builds")
    flaky.add_argument(
        "--quarantine",
        metavar="FILE",
        help="the quarantine list now (vLLM's quarantined_tests.json): its entries stay unless they earned "
        "their way back (5 passes in a row)",
    )
    flaky.add_argument("--out", metavar="FILE", help="write the new list there (default: standard output)")
    flaky.set_defaults(module="harness.report.flaky")


def _add_run(sub) -> None:
    run = sub.add_parser(
        "run",
        help="run a suite's phases in order and write the run directory",
        usage="harness run SUITE [options] [-- pytest args]",
        epilog=RUN_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("suite", help="a suite of [tool.harness.suites] in pyproject.toml, e.g. pooling")
    run.add_argument(
        "--platform",
        choices=PLATFORMS,
        help="the platform to run on (default: detected)",
    )
    run.add_argument("--phase", action="append", dest="phases", metavar="NAME", help="run only these phases")
    run.add_argument(
        "--out", help="run directory (default harness-out/<suite>-<platform>/, a shard's with -<i>of<N>)"
    )
    run.add_argument("--fail-fast", action="store_true", help="stop after the first failing phase")
    run.add_argument("--shard", metavar="I/N", help="run shard I (0-based) of N; Buildkite fills it")
    options.add_arguments(run, options.DURATIONS_FROM, options.HISTORY_OPTION)  # with a variable or a key
    run.add_argument(
        "--timeouts-from-history",
        action="store_true",
        help="give each test that ran in the history pytest-timeout's timeout from its recorded seconds "
        "(x1.5 + 60 s, at least 60 s, at most test_timeout_s), unless it sets its own",
    )
    options.add_arguments(run, options.GPU_FREE_OPTION, options.BASELINE)
    run.add_argument(
        "--changed-since",
        metavar="REF",
        help="run only the tests a change since REF's merge base touches (footprints from --history; the "
        "working tree counts); the others are reported skipped by selection (docs/selection.md)",
    )
    run.add_argument(
        "--shadow", action="store_true", help="with --changed-since: run every test, record what it skips"
    )
    run.set_defaults(module="harness.run.command")


def _add_compare(sub) -> None:
    compare = sub.add_parser(
        "compare",
        help="compare two reports: starts, wall, outcomes",
        epilog=COMPARE_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compare.add_argument("before", help="the baseline: a report.json or its run directory")
    compare.add_argument("after", help="the run to judge: a report.json or its run directory")
    compare.add_argument("--format", choices=["text", "md", "json"], default="text", help="output format")
    _add_gate(compare, "AFTER is worse; 'starts' names each file whose starts grew")
    compare.set_defaults(module="harness.report.compare")
    merge = sub.add_parser(
        "merge",
        help="one suite's report from its shards' run directories (the parallel jobs of one build)",
        epilog=MERGE_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    merge.add_argument(
        "shards", nargs="+", help="run directories (or report.json files) of one suite's shards"
    )
    merge.add_argument("--out", required=True, help="where the merged report.json and summary.md go")
    merge.add_argument("--baseline", metavar="REPORT", help="the base branch's report: before -> after")
    _add_gate(merge, "this build is worse than --baseline")
    merge.set_defaults(module="harness.report.merge")


def _add_gate(parser: argparse.ArgumentParser, worse: str) -> None:
    """``--fail-on-regression``, as ``compare`` and ``merge`` both take it."""
    parser.add_argument(
        "--fail-on-regression",
        action="append",
        default=[],
        metavar="WHAT",
        help=f"'starts' or 'wall:10%%': exit 1 when {worse}",
    )


def _add_ci(sub) -> None:
    ci = sub.add_parser("ci", help="generate CI configuration")
    ci_sub = ci.add_subparsers(dest="ci_command", required=True)
    buildkite = ci_sub.add_parser("buildkite", help="print a dynamic Buildkite pipeline (YAML)")
    buildkite.add_argument(
        "--platforms", default=None, help="comma-separated, e.g. cuda,rocm (default: [tool.harness.ci])"
    )
    buildkite.add_argument(
        "--suites", default=None, help="comma-separated, e.g. pooling,generation (default: [tool.harness.ci])"
    )
    buildkite.add_argument(
        "--parallelism", type=int, default=None, help="jobs per platform x suite (default: [tool.harness.ci])"
    )
    buildkite.add_argument(
        "--history",
        metavar="DIR",
        help="the cells' last merged reports as the cache restores them (DIR/<suite>-<platform>, e.g. "
        "harness-baseline): each test step's timeout_in_minutes from their durations, and under "
        "[tool.harness.ci] gpu_free_job the GPU cells' GPU-free tests in CPU steps (docs/ci.md)",
    )
    buildkite.add_argument(
        "--history-step",
        action="store_true",
        help="print instead one step that restores each cell's last merged report from the merge steps' "
        "cache and uploads the pipeline made --history from it (the bootstrap's)",
    )
    _add_ci_settings(buildkite)
    buildkite.set_defaults(module="harness.ci.buildkite")
    matrix = ci_sub.add_parser("matrix", help="print the platform x suite matrix")
    matrix.add_argument(
        "--format",
        choices=["github", "github-output", "json"],
        default="github",
        help="GitHub Actions matrix, the reusable workflow's $GITHUB_OUTPUT lines, or plain JSON",
    )
    matrix.add_argument("--platforms", default=None, help="comma-separated (default: [tool.harness.ci])")
    matrix.add_argument("--suites", default=None, help="comma-separated (default: [tool.harness.ci])")
    matrix.add_argument(
        "--history",
        metavar="DIR",
        help="the cells' last merged reports as the cache restores them (DIR/<suite>-<platform>): each "
        "job's timeout_minutes from their durations, and under [tool.harness.ci] gpu_free_job a CPU row "
        "for the GPU cells' GPU-free tests (docs/ci.md)",
    )
    matrix.add_argument(
        "--timeout-in-minutes",
        type=int,
        default=None,
        help="the most a job may take, and its timeout without history (default: [tool.harness.ci])",
    )
    _add_ci_settings(matrix)
    matrix.set_defaults(module="harness.ci.github")


def _add_ci_settings(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ci-settings",
        metavar="PYPROJECT",
        help="take [tool.harness.ci] (queues, images, mounts, device flags, env) from this file, e.g. the "
        "base branch's pyproject.toml, not the pull request's (docs/ci.md)",
    )


def _private_writes() -> None:
    """What the harness and the phases it starts write (the run directory, reports, JUnit, ledgers) is
    never writable by group or others, whatever the caller's umask (``umask 000`` made them so)."""
    os.umask(os.umask(0) | 0o022)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first "--" belongs to pytest, so options may stand on either side of the suite.
    pytest_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    try:
        args = _parser().parse_args(argv[: len(argv) - len(pytest_args) - (1 if "--" in argv else 0)])
    except SystemExit as done:  # --help, or the one-line usage error above
        return done.code if isinstance(done.code, int) else BAD_INPUT
    args.pytest_args = pytest_args
    _private_writes()
    try:
        return importlib.import_module(args.module).main(args)
    except HarnessError as error:
        _print_error(str(error))
        return error.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `harness ci matrix | head`: the reader left; say nothing more and keep stdout from raising again.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        return 141
    except Exception as error:  # noqa: BLE001 -- a bug of ours: shown whole, and never read as "tests failed"
        traceback.print_exc()
        print(f"harness: internal error: {type(error).__name__}: {error}"[:MAX_ERROR_CHARS], file=sys.stderr)
        return FAULT


if __name__ == "__main__":
    sys.exit(main())
