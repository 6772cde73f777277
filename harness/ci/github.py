"""``harness ci matrix``: the platform × suite matrix for a GitHub Actions ``strategy.matrix``.

``--format github`` prints one compact line, ``{"include": [...]}``, for ``echo "matrix=..." >>
"$GITHUB_OUTPUT"`` and ``fromJSON``; ``--format json`` prints the same cells with their queue and run
directory, indented, for people and other tools.
"""

from __future__ import annotations

import argparse
import json

from harness.ci.matrix import cells, load


def matrix(args: argparse.Namespace) -> list[dict]:
    """One dict per cell; ``session`` is the nox session the job runs, ``artifact`` a name unique per cell.

    ``image`` and ``container_options`` are the job's ``container`` (empty: the job runs on the runner);
    ``fail_on_regression`` and ``baseline_branches`` are for the compare job after the tests.
    """
    settings, known_suites = load(ci_from=args.ci_settings)
    rows = []
    for cell in cells(settings, known_suites, args.platforms, args.suites):
        container = settings.container(cell.platform)
        rows.append(
            {
                "platform": cell.platform,
                "suite": cell.suite,
                "session": cell.session,
                "run_dir": cell.run_dir,
                "artifact": f"harness-{cell.key}",
                "queue": settings.queues[cell.platform],
                "image": container.image if container else "",
                # values are checked to need no quoting: the runner splits this string itself
                "container_options": " ".join(container.docker_flags()) if container else "",
                # the compare job: gates for builds that compare, branches whose pushes keep the baseline
                "fail_on_regression": " ".join(settings.fail_on_regression),
                "baseline_branches": list(settings.baseline_branches),
            }
        )
    return rows


def main(args: argparse.Namespace) -> int:
    rows = matrix(args)
    if args.format == "github":
        print(json.dumps({"include": rows}, separators=(",", ":")))
    else:
        print(json.dumps(rows, indent=2))
    return 0
