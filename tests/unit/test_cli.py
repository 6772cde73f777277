"""The ``harness`` command's own surface: ``--version``, help text on every option and argument, and the exit
codes ``--help`` documents."""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

from harness.cli import _parser
from harness.run import exits


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_version_is_the_distribution_version():
    done = subprocess.run([sys.executable, "-m", "harness", "--version"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"harness {importlib.metadata.version('pytest-gpu-harness')}\n"


def test_every_option_and_argument_has_help():
    missing = [
        f"{parser.prog}: {'/'.join(action.option_strings) or action.dest}"
        for parser in _parsers(_parser())
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction) and not action.help
    ]
    assert missing == []


def test_run_help_lists_the_exit_codes_the_run_returns_and_the_docs_agree():
    done = subprocess.run([sys.executable, "-m", "harness", "run", "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    listed = re.findall(r"^  (\d+(?:\+N)?) ", done.stdout.split("exit codes:")[1], re.MULTILINE)
    assert listed == ["0", "1", "2", "3", "4", "128+N"]
    assert [exits.PASSED, exits.FAILED, exits.BAD_INPUT, exits.TIMED_OUT, exits.FAULT] == [0, 1, 2, 3, 4]
    docs = (Path(__file__).parents[2] / "docs" / "exit-codes.md").read_text()
    run_table = docs.split("## `harness run`")[1].split("##")[0]
    assert re.findall(r"^\| (\d+(?:\+N)?) \|", run_table, re.MULTILINE) == listed
    compare = subprocess.run(
        [sys.executable, "-m", "harness", "compare", "--help"], capture_output=True, text=True
    )
    assert re.findall(r"^  (\d) ", compare.stdout.split("exit codes:")[1], re.MULTILINE) == ["0", "1", "2"]
