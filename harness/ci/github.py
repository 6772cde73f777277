"""``harness ci matrix``: the platform × suite matrix for a GitHub Actions ``strategy.matrix``.

``--format github`` prints one compact line, ``{"include": [...]}``, for ``echo "matrix=..." >>
"$GITHUB_OUTPUT"`` and ``fromJSON``; ``--format github-output`` prints the lines the reusable workflow's
matrix job appends to ``$GITHUB_OUTPUT`` (``matrix``: the test jobs; ``cells``: the compare jobs, one per
cell; ``baseline_branches``); ``--format json`` prints the test jobs' rows, indented, for people and other
tools.

GitHub's matrix is static once the matrix job has written it, so what the last build's reports decide is
decided there: with ``--history DIR`` (the cells' kept reports, restored by that job from the cache the
``keep-history`` job saves) each row carries its job's ``timeout_minutes`` (``harness.ci.learned``, the
rule Buildkite's ``timeout_in_minutes`` follows) and, under ``gpu_free_job``, a GPU cell whose history lists
GPU-free tests gets a CPU row of its own (``gpu_free: only``) and its own row ``gpu_free: deselect``.
"""

from __future__ import annotations

import argparse
import json

from harness.ci import baseline_step
from harness.ci.learned import decide
from harness.ci.matrix import CI_KINDS, Cell, CiSettings, cells, load
from harness.config.validate import check
from harness.report.gpu_free_job import KEPT

_MINUTES = CI_KINDS["timeout_in_minutes"]  # --timeout-in-minutes within the setting's bounds


def rows(args: argparse.Namespace) -> tuple[list[dict], list[dict], CiSettings]:
    """The test jobs' rows (each cell's, and after a GPU cell the CPU row of its GPU-free tests where they
    move), the compare jobs' rows (one per cell) and the settings they came from."""
    settings, known_suites = load(ci_from=args.ci_settings)
    given = getattr(args, "timeout_in_minutes", None)
    bound = settings.timeout_in_minutes if given is None else check("--timeout-in-minutes", given, _MINUTES)
    tests, compares = [], []
    for cell in cells(settings, known_suites, args.platforms, args.suites):
        # GitHub runs a cell as one job: its history's recorded seconds as one shard
        decided = decide(cell, settings, 1, getattr(args, "history", None), bound)
        row = _row(cell, settings, decided.minutes)
        if decided.moves:
            row |= {"gpu_free": "deselect", "gpu_free_artifact": f"{row['artifact']}-{KEPT}"}
            tests += [row, _gpu_free_row(cell, settings, row)]
        else:
            tests.append(row)
        compares.append(row)
    return tests, compares, settings


def _row(cell: Cell, settings: CiSettings, minutes: int) -> dict:
    """One cell's job; ``session`` is the nox session it runs, ``artifact`` a name unique per job.

    ``image`` and ``container_options`` are the job's ``container`` (empty: the job runs on the runner);
    ``timeout_minutes`` its ``timeout-minutes``; ``history_platform`` the platform whose kept reports are
    its history; ``compile_cache`` its ``HARNESS_COMPILE_CACHE``; ``gpu_free`` its ``HARNESS_GPU_FREE``;
    ``select`` its ``HARNESS_SELECT`` (``[tool.harness.ci] select``);
    ``fail_on_regression``, ``baseline_branches`` and ``gpu_free_artifact`` are for the compare job.
    """
    container = settings.container(cell.platform)
    return {
        "platform": cell.platform,
        "suite": cell.suite,
        "label": f"{cell.platform} {cell.suite}",
        "session": cell.session,
        "run_dir": cell.run_dir,
        "artifact": f"harness-{cell.key}",
        "queue": settings.queues[cell.platform],
        "image": container.image if container else "",
        # values are checked to need no quoting: the runner splits this string itself
        "container_options": " ".join(container.docker_flags()) if container else "",
        "timeout_minutes": minutes,
        "history_platform": cell.platform,
        "compile_cache": baseline_step.compile_dir(cell),
        "gpu_free": "",
        "select": settings.select,  # HARNESS_SELECT: a pull request's build selects, a branch's records
        # the compare job: gates for builds that compare, branches whose pushes keep the baseline
        "fail_on_regression": " ".join(settings.fail_on_regression),
        "baseline_branches": list(settings.baseline_branches),
        "gpu_free_artifact": "",
    }


def _gpu_free_row(cell: Cell, settings: CiSettings, row: dict) -> dict:
    """The CPU job of a GPU cell's GPU-free tests: the cpu session on a cpu runner with the GPU cell's
    history (``HARNESS_GPU_FREE=only``), into ``<cell's run dir>-gpu-free``; no compile cache (Buildkite's
    CPU step keeps none either)."""
    cpu = _row(Cell("cpu", cell.suite), settings, row["timeout_minutes"])
    return cpu | {
        "label": f"{cell.platform} {cell.suite}: GPU-free tests on the CPU",
        "run_dir": baseline_step.gpu_free_dir(cell),
        "artifact": row["gpu_free_artifact"],
        "history_platform": cell.platform,
        "compile_cache": "",
        "gpu_free": "only",
    }


def main(args: argparse.Namespace) -> int:
    tests, compares, settings = rows(args)
    if args.format == "github":
        print(_line({"include": tests}))
    elif args.format == "github-output":
        print(f"matrix={_line({'include': tests})}")
        print(f"cells={_line({'include': compares})}")
        print(f"baseline_branches={_line(list(settings.baseline_branches))}")
    else:
        print(json.dumps(tests, indent=2))
    return 0


def _line(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))
