"""Which phase each collected test belongs to, from one collection (``--harness-phases FILE``).

``harness run`` collects the suite once with ``--collect-only`` and this plugin, instead of starting
pytest for a phase that selects nothing: on vLLM's tree each start imports its conftest (torch, vLLM),
tens of seconds. A phase's ``-m`` / ``-k`` are applied by pytest's own ``mark`` plugin, so an expression
selects here exactly what it selects in the phase's run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest


class Membership:
    """Reads ``{"phases": [{name, paths, markers, keywords}]}`` from ``path``; adds ``"members"`` to it:
    per phase, the node ids it selects, in collection order."""

    def __init__(self, path: Path):
        self.path = path

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        table = json.loads(self.path.read_text())
        mark = config.pluginmanager.get_plugin("mark")
        saved = config.option.markexpr, config.option.keyword
        members = {}
        try:
            for phase in table["phases"]:
                # a path may be a node id (file.py::test): its file's tests count, the phase's run narrows
                roots = [Path(p.split("::")[0]).resolve() for p in phase["paths"]]
                chosen = [i for i in items if any(i.path.is_relative_to(r) for r in roots)]
                config.option.markexpr = phase["markers"] or ""
                config.option.keyword = phase["keywords"] or ""
                mark.pytest_collection_modifyitems(items=chosen, config=config)
                members[phase["name"]] = [item.nodeid for item in chosen]
        finally:
            config.option.markexpr, config.option.keyword = saved
        self.path.write_text(json.dumps({**table, "members": members}, indent=1) + "\n")
