"""Which phase each collected test belongs to, from one collection (``--harness-phases FILE``).

``harness run`` collects the suite once with ``--collect-only`` and this plugin, instead of starting
pytest for a phase that selects nothing: on vLLM's tree each start imports its conftest (torch, vLLM),
tens of seconds. A phase's ``-m`` / ``-k`` are applied by pytest's own ``mark`` plugin, so an expression
selects here exactly what it selects in the phase's run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.report.store import selection_file, write_atomic


class Membership:
    """Reads ``{"phases": [{name, paths, markers, keywords}]}`` from ``path``; adds ``"members"`` to it:
    per phase, the node ids it selects, in collection order."""

    def __init__(self, path: Path):
        self.path = path

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        table = selection_file(self.path)
        mark: Any = config.pluginmanager.get_plugin("mark")
        saved = config.option.markexpr, config.option.keyword
        members = {}
        try:
            for phase in table["phases"]:
                chosen = [i for i in items if any(_under(i, path) for path in phase["paths"])]
                config.option.markexpr = phase["markers"] or ""
                config.option.keyword = phase["keywords"] or ""
                mark.pytest_collection_modifyitems(items=chosen, config=config)
                members[phase["name"]] = [item.nodeid for item in chosen]
        finally:
            config.option.markexpr, config.option.keyword = saved
        write_atomic(self.path, json.dumps({**table, "members": members}, indent=1) + "\n")


def _under(item: pytest.Item, path: str) -> bool:
    """Whether ``path`` as given on pytest's command line (a directory, a file, or ``file::name``) names
    ``item``; relative paths are from the current directory, as in the phase's own run."""
    file, _, name = path.partition("::")
    if not item.path.is_relative_to(Path(file).resolve()):
        return False
    within = item.nodeid.partition("::")[2]
    return not name or within == name or within.startswith((f"{name}::", f"{name}["))
