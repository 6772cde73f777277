"""What each phase of a run selects: the run's ``-m`` / ``-k`` ANDed in, and every phase's tests known
from one collection before any phase starts.

pytest keeps the last ``-m`` it is given, so ``harness run S -- -m core_model`` appended as it is would
replace each phase's own expression and run a test in every phase. Taken out of the pass-through
arguments and ANDed into each phase's, it narrows instead. One ``--collect-only`` pass with the plugin's
``--harness-phases`` then says which phases select nothing (they are skipped: no pytest, no conftest
import) and which tests an earlier phase already took (deselected from later ones).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.config.suites import Phase
from harness.report.outcomes import NO_TESTS

_OPTIONS = {"-m": "markers", "-k": "keywords"}


def split_selection(args: list[str]) -> tuple[list[str], dict[str, str | None]]:
    """``args`` without their ``-m`` / ``-k`` (``-m X``, ``-mX``), and the last of each, as pytest reads."""
    rest, chosen = [], dict.fromkeys(_OPTIONS.values())
    values = iter(args)
    for arg in values:
        option = arg[:2]
        if option in _OPTIONS and not arg.startswith("--"):
            chosen[_OPTIONS[option]] = arg[2:] or next(values, "")
        else:
            rest.append(arg)
    return rest, chosen


def members(
    phases: list[tuple[Phase, tuple[str, ...]]], extra: list[str], env: dict, out: Path, timeout_s
) -> dict[str, list[str]] | None:
    """Per phase (with the paths it runs), the node ids it selects; None when collection failed, so that
    every phase runs and shows the error itself."""
    path = out / "phases-collected.json"
    table = [
        {"name": p.name, "paths": list(paths), "markers": p.markers, "keywords": p.keywords}
        for p, paths in phases
    ]
    path.write_text(json.dumps({"phases": table}, indent=1) + "\n")
    roots = list(dict.fromkeys(p for _, paths in phases for p in paths))
    command = [sys.executable, "-m", "pytest", *roots, *extra, "--collect-only", "-q", "-n", "0"]
    try:  # the node ids it lists are in the file; the log keeps the phases' own output
        code = subprocess.run(
            [*command, f"--harness-phases={path}"], env=env, stdout=subprocess.DEVNULL, timeout=timeout_s
        ).returncode
    except subprocess.TimeoutExpired:
        return None
    found = json.loads(path.read_text()).get("members")
    return found if code in (0, NO_TESTS) and found is not None else None


def claimed(order: list[str], found: dict[str, list[str]]) -> dict[str, list[str]]:
    """Per phase, its node ids that an earlier phase selects too: deselected there, so none runs twice."""
    taken: set[str] = set()
    earlier = {}
    for name in order:
        ids = found.get(name, [])
        earlier[name] = [i for i in ids if i in taken]
        taken.update(ids)
    return earlier
