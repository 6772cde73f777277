"""What pytest itself reads in ``harness run``'s pass-through arguments, and whether every selection
expression of the run parses in pytest's own grammar.

Loaded into the run's one collection with ``-p harness.run.probe``, where pytest has parsed the arguments
after ``--`` as each phase's pytest will (option clusters such as ``-vm slow``, ``-m=expr``, ``--markexpr``,
``-k``). It adds to the JSON file named by ``$HARNESS_SELECTION_FILE`` the run's ``markers`` and ``keywords``,
pytest's ``rootdir`` (the run's split names tests relative to it), and the first expression (the run's, then
each phase's) that pytest's ``mark`` plugin rejects as ``error``: the same check a phase's pytest makes, so an
expression that passes here cannot end a phase, under xdist, as an INTERNALERROR. A ``-k`` expression is also
matched against the first collected test once collection is done: pytest refuses some (call parameters, ``-k
'test(x=1)'``) only when it matches a test.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from harness.report.store import selection_file, write_atomic

FILE = "HARNESS_SELECTION_FILE"


@pytest.hookimpl(trylast=True)  # after the suite's conftest registered its markers
def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get(FILE):
        return
    path = Path(os.environ[FILE])
    table = selection_file(path)
    run: dict[str, Any] = {"markers": config.option.markexpr or "", "keywords": config.option.keyword or ""}
    run["rootdir"] = str(config.rootpath)  # the run's split's node ids are relative to it
    checks = [("harness run -m", run["markers"], ""), ("harness run -k", "", run["keywords"])]
    for phase in table["phases"]:
        checks.append((f"phase {phase['name']!r} markers", phase["markers"] or "", ""))
        checks.append((f"phase {phase['name']!r} keywords", "", phase["keywords"] or ""))
    error = next((problem for where, m, k in checks if (problem := _rejected(config, where, m, k))), None)
    write_atomic(path, json.dumps({**table, **run, "error": error}, indent=1) + "\n")
    config.stash[CHECKS] = [(where, k) for where, m, k in checks if k]


CHECKS = pytest.StashKey[list[tuple[str, str]]]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Each ``-k`` expression matched against the first test, as a phase's pytest will match them all."""
    checks = session.config.stash.get(CHECKS, [])
    if not session.items or not checks:
        return
    path = Path(os.environ[FILE])
    table = selection_file(path)
    if table.get("error"):
        return
    first = session.items[:1]
    error = next((p for where, k in checks if (p := _rejected(session.config, where, "", k, first))), None)
    if error:
        write_atomic(path, json.dumps({**table, "error": error}, indent=1) + "\n")


def _rejected(
    config: pytest.Config, where: str, markers: str, keywords: str, items: list | None = None
) -> str | None:
    """pytest's own complaint about ``-m markers -k keywords``, if it has one (selecting from a copy of
    ``items``, none by default)."""
    mark: Any = config.pluginmanager.get_plugin("mark")
    saved = config.option.markexpr, config.option.keyword
    config.option.markexpr, config.option.keyword = markers, keywords
    try:  # a copy: the probe's collection keeps its items (what pytest reports deselected is its own)
        mark.pytest_collection_modifyitems(items=list(items or []), config=config)
    except pytest.UsageError as error:
        return f"{where}: {error}"
    finally:
        config.option.markexpr, config.option.keyword = saved
    return None
