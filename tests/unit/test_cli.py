"""The ``harness`` command's own surface: ``--version`` and help text on every option and argument."""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys

from harness.cli import _parser


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
