"""What pytest itself reads in ``harness run``'s pass-through arguments, and whether every selection
expression of the run parses in pytest's own grammar.

Loaded into the run's one collection with ``-p harness.run.probe``, where pytest has parsed the arguments
after ``--`` as each phase's pytest will (option clusters such as ``-vm slow``, ``-m=expr``,
``--markexpr``, ``-k``). It adds to the JSON file named by ``$HARNESS_SELECTION_FILE`` the run's
``markers`` and ``keywords``, and the first expression (the run's, then each phase's) that pytest's
``mark`` plugin rejects as ``error``: the same check a phase's pytest makes, so an expression that passes
here cannot end a phase, under xdist, as an INTERNALERROR.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

FILE = "HARNESS_SELECTION_FILE"


@pytest.hookimpl(trylast=True)  # after the suite's conftest registered its markers
def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get(FILE):
        return
    path = Path(os.environ[FILE])
    table = json.loads(path.read_text(encoding="utf-8"))
    run = {"markers": config.option.markexpr or "", "keywords": config.option.keyword or ""}
    checks = [("harness run -m", run["markers"], ""), ("harness run -k", "", run["keywords"])]
    for phase in table["phases"]:
        checks.append((f"phase {phase['name']!r} markers", phase["markers"] or "", ""))
        checks.append((f"phase {phase['name']!r} keywords", "", phase["keywords"] or ""))
    error = next((problem for where, m, k in checks if (problem := _rejected(config, where, m, k))), None)
    path.write_text(json.dumps({**table, **run, "error": error}, indent=1) + "\n", encoding="utf-8")


def _rejected(config: pytest.Config, where: str, markers: str, keywords: str) -> str | None:
    """pytest's own complaint about ``-m markers -k keywords``, if it has one (with no items to select)."""
    mark: Any = config.pluginmanager.get_plugin("mark")
    saved = config.option.markexpr, config.option.keyword
    config.option.markexpr, config.option.keyword = markers, keywords
    try:
        mark.pytest_collection_modifyitems(items=[], config=config)
    except pytest.UsageError as error:
        return f"{where}: {error}"
    finally:
        config.option.markexpr, config.option.keyword = saved
    return None
