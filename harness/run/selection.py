"""What each phase of a run selects: the run's ``-m`` / ``-k`` ANDed in, and every phase's tests known
from one collection before any phase starts.

pytest keeps the last ``-m`` it is given, so ``harness run S -- -m core_model`` passed on as it is would
replace each phase's own expression and run a test in every phase. One ``--collect-only`` pass, with the
arguments after ``--`` as given, reads them with pytest's own parser (``harness.run.probe``: ``-vm slow``,
``-m=expr``, ``--markexpr``), checks every expression with pytest's own grammar and, with the plugin's
``--harness-phases``, says which phases select nothing (they are skipped: no pytest, no conftest import)
and which tests an earlier phase already took (deselected from later ones). Each phase then gets the
run's expressions ANDed into its own, last on its command line, so they narrow instead of replace.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.config.suites import Phase
from harness.errors import HarnessError
from harness.report.outcomes import NO_TESTS
from harness.report.store import selection_file, write_atomic
from harness.run.probe import FILE
from harness.run.process import Kept


def members(
    phases: list[tuple[Phase, tuple[str, ...]]],
    extra: list[str],
    env: dict,
    out: Path,
    timeout_s: float | None,
    keep: Sequence[int] = (),
) -> tuple[dict[str, list[str]] | None, dict[str, str | None]]:
    """Per phase (with the paths it runs), the node ids it selects (None when collection failed, so that
    every phase runs and shows the error itself), and the run's own ``markers`` and ``keywords`` as pytest
    read them, and pytest's ``rootdir`` (None where pytest stopped before reading them). An expression
    pytest rejects is a ``HarnessError``."""
    path, selection = out / "phases-collected.json", out / "selection.json"
    table = [
        {"name": p.name, "paths": list(paths), "markers": p.markers, "keywords": p.keywords}
        for p, paths in phases
    ]
    write_atomic(path, json.dumps({"phases": table}, indent=1) + "\n")  # a full disk: one line, exit 4
    write_atomic(selection, json.dumps({"phases": table}, indent=1) + "\n")
    roots = list(dict.fromkeys(p for _, paths in phases for p in paths))
    command = [sys.executable, "-m", "pytest", *roots, *extra, "--collect-only", "-q", "-n", "0"]
    command += ["-p", "harness.run.probe", f"--harness-phases={path}"]
    # the node ids it lists are in the file; pytest's errors are the phases' to show (or the probe's)
    kept = Kept(
        command,
        {**env, FILE: str(selection.resolve())},
        keep,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        code: int | None = kept.wait(timeout_s)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        kept.end()
    try:
        read = selection_file(selection)
        found = selection_file(path).get("members")
    finally:  # raw node ids (a test parameter may be a credential): never left in the run directory
        path.unlink(missing_ok=True)
        selection.unlink(missing_ok=True)
    if read.get("error"):
        raise HarnessError(read["error"])
    chosen = {
        "markers": read.get("markers"),
        "keywords": read.get("keywords"),
        "rootdir": read.get("rootdir"),
    }
    return (found if code in (0, NO_TESTS) and found is not None else None), chosen


def claimed(order: list[str], found: dict[str, list[str]]) -> dict[str, list[str]]:
    """Per phase, its node ids that an earlier phase selects too: deselected there, so none runs twice."""
    taken: set[str] = set()
    earlier = {}
    for name in order:
        ids = found.get(name, [])
        earlier[name] = [i for i in ids if i in taken]
        taken.update(ids)
    return earlier
