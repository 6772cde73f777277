"""Backs docs/selection.md § Replay: selection on this project's own history (issue 59 item 5). For the
last N commits that changed ``harness/`` or ``tests/``, oldest first, each commit's tests run once, in
shadow (``harness run --changed-since PARENT --history <the previous commit's report> --shadow``): every
test runs (the truth: what fails at the commit), and the run records the commit's footprints, the next
commit's history. One run per commit gives both.

    python benchmarks/selection_replay.py --work DIR [--commits 40] [--suite-args "tests/unit/test_x.py ..."]
    python benchmarks/selection_replay.py --work DIR --table      # the rows so far, and their distribution
    python benchmarks/selection_replay.py --work DIR --estimate REPORT  # each diff, one run's footprints
    python benchmarks/selection_replay.py --work DIR --jobs 10 ...  # the runs side by side, no shadow
    python benchmarks/selection_replay.py --work DIR --ingest OTHER     # rows and runs made elsewhere

The figures are this checkout's selection (``harness.select.choose``, as ``harness run`` calls it) for each
commit: from the previous run's footprints, markers and engine groups, ``git diff`` from that commit and
the commit's ``[tool.harness.select]``, over the tests the commit's run collected; a false green is a test
it skips that failed in the commit's run. ``--table`` recomputes them from the kept reports, so a change to
selection is measured again without running anything. Each row also shows what the commit's own harness
selected in its shadow run (``at the commit``).

Each commit runs in a ``git worktree`` of its own under ``DIR/trees`` with its own ``harness`` first on
``PYTHONPATH`` (the tests test that commit's code, and its plugin records), its report kept under
``DIR/runs/<commit>``, its row appended to ``DIR/rows.jsonl``: a second call skips the commits done
(resumable). The first commit's history is a plain run of its parent with footprints
(``HARNESS_FOOTPRINTS=1``). The suite is ``[tool.harness.suites.replay]``, added to the worktree's
pyproject.toml and hidden from git (``update-index --skip-worktree``: it is the replay's setting, not the
commit's change); ``--suite-args`` are its test paths (``tests/...``; default ``tests/unit``) and pytest
options after ``--`` (``-m``, ``-k``); a listed test path the commit does not have is left out of that
commit's run (said in its row).

A commit whose parent is not the previous replayed commit (the commits between changed neither folder)
takes the previous replayed commit's footprints as its parent's (harness/ and tests/ are the same there);
its selection is from its own diff, parent to commit (its own shadow run selected since the previous
replayed commit: wider). Commits made before footprints existed cannot be replayed (their harness has no
recorder): those rows say so and are not counted.

``--jobs N`` runs N commits at a time (on a machine with the cores; benchmarks/gpu/selection_replay.sh
does it on the GPU machine's CPUs): a commit's truth and footprints do not depend on its history, only its
own shadow record does, so these runs record no selection (``at the commit`` is ``-``) and ``--table``
selects from their reports as from any. ``--ingest OTHER`` adds another work folder's rows (commits not
yet here) and their runs. Each row names the Python its runs used (3.12+: the ``sys.monitoring``
recorder, where the commit's harness has one).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness import split
from harness.errors import ReportError
from harness.report import previous, store
from harness.select import changes, rules
from harness.select import table as footprints
from harness.select.choose import choose

FOLDERS = ("harness", "tests")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def spread(shares: list[float]) -> str:
    """Shares selected, summed up as the docs give them: median, quartiles (inclusive), min and max."""
    q = statistics.quantiles(shares, n=4, method="inclusive") if len(shares) > 1 else [shares[0]] * 3
    return (
        f"median selected {statistics.median(shares):.0%} (quartiles {q[0]:.0%}, {q[2]:.0%}; "
        f"min {min(shares):.0%}, max {max(shares):.0%})"
    )


def commits(repo: Path, count: int, head: str = "HEAD") -> list[str]:
    """The last ``count`` commits of ``head``'s first-parent line that changed harness/ or tests/, oldest
    first."""
    found = git(repo, "rev-list", "--first-parent", f"--max-count={count}", head, "--", *FOLDERS)
    return list(reversed(found.split()))


def tree(repo: Path, work: Path, commit: str, given: list[str]) -> tuple[Path, list[str], list[str]]:
    """A worktree at ``commit`` whose pyproject.toml declares the replay's suite (the given test paths the
    commit has, else tests/unit), invisible to git; the other pytest arguments, and the listed test paths
    the commit does not have."""
    where = work / "trees" / commit[:12]
    if not where.exists():
        git(repo, "worktree", "add", "--detach", "--quiet", str(where), commit)
    paths = [arg for arg in given if arg.startswith("tests/")]
    missing = [path for path in paths if not (where / path.split("::")[0]).exists()]
    kept = [path for path in paths if path not in missing] or ["tests/unit"]
    suite = f"\n[tool.harness.suites.replay]  # selection_replay.py\npaths = {json.dumps(kept)}\n"
    (where / "pyproject.toml").write_text(git(repo, "show", f"{commit}:pyproject.toml") + suite)
    git(where, "update-index", "--skip-worktree", "pyproject.toml")
    return where, [arg for arg in given if arg not in paths], missing


def run(where: Path, out: Path, python: str, suite_args: list[str], select: list[str]) -> dict:
    """One ``harness run replay`` at ``where`` (its own harness first on the path), niced; its report's
    fields the row needs."""
    env = {**os.environ, "PYTHONPATH": str(where), "HARNESS_FOOTPRINTS": "1"}
    for name in ("HARNESS_SELECT", "HARNESS_HISTORY", "GITHUB_BASE_REF", "BUILDKITE_PULL_REQUEST"):
        env.pop(name, None)
    command = ["nice", "-n", "10", python, "-m", "harness", "run", "replay", "--platform", "cpu"]
    command += ["--out", str(out), *select, "--", *suite_args]
    started = time.monotonic()
    done = subprocess.run(command, cwd=where, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    (out.parent / f"{out.name}.log").write_text(done.stdout + done.stderr)
    try:
        report = json.loads((out / "report.json").read_text())
    except (OSError, ValueError):
        return {"exit": done.returncode, "wall_s": round(wall), "error": "no report.json"}
    tests = report.get("tests") or []
    failed = sorted(t["nodeid"] for t in tests if t.get("outcome") in ("failed", "error"))
    selection = report.get("selection") or {}
    return {
        "exit": done.returncode,
        "wall_s": round(wall),
        "tests": len(tests),
        "failed": failed,
        "footprints": len((report.get("footprints") or {}).get("tests") or {}),
        "selected": len(selection.get("selected") or {}),
        "skipped": len(selection.get("skipped") or []),
        "everything": selection.get("everything"),
        "false_green": selection.get("false_green"),
        "changed": selection.get("changed"),
    }


def rows(work: Path) -> list[dict]:
    path = work / "rows.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []


def today(repo: Path, work: Path, row: dict, select: dict | None = None) -> dict | None:
    """This checkout's selection for the row's commit (``harness.select.choose``, as ``harness run`` calls
    it): the tests the commit's run collected, the history's footprints, markers and engine groups, and
    ``git diff`` from the row's ref to the commit, under the commit's ``[tool.harness.select]``; its false
    greens are the skipped tests that failed in the commit's run. None where a report is missing."""
    try:
        ran = json.loads((work / "runs" / row["commit"][:12] / "report.json").read_text())
        source = work / "runs" / row.get("history", row["ref"][:12]) / "report.json"
        history = previous.from_report(store.load(source), str(source))  # as harness run reads it
    except (OSError, ValueError, KeyError, ReportError):
        return None
    decoded = footprints.decode(dict(history.report or {}).get("footprints"))
    diff = git(
        repo, "diff", "--name-status", "-M", "-z", row["parent"], row["commit"], "--"
    )  # its own change
    project = tomllib.loads(git(repo, "show", f"{row['commit']}:pyproject.toml"))
    given = rules.load(
        select if select is not None else project.get("tool", {}).get("harness", {}).get("select")
    )
    tests = [t["nodeid"] for t in ran["tests"]]
    prior = decoded if isinstance(decoded, str) else decoded[0]
    markers = {} if isinstance(decoded, str) else decoded[1]
    made = choose(
        tests, prior, markers, changes.parse(diff), given, history.groups.unit, "", changes.renames(diff),
        history.failed,
    )  # fmt: skip
    failed = {t["nodeid"] for t in ran["tests"] if t.get("outcome") in ("failed", "error")}
    return {
        "selected": len(made.selected),
        "skipped": len(made.skipped),
        "everything": made.everything,
        "false_green": sorted(failed.intersection(made.skipped)),
    }


def table(repo: Path, work: Path, found: list[dict], select: dict | None = None) -> list[str]:
    """Per commit: this checkout's selection (selected / total, false greens, why everything if so) and
    the commit's own harness's (its shadow report); then the distribution of this checkout's."""
    out = [
        "commit       selected/total  share  false greens  failed  at the commit  python  why all (or note)"
    ]
    shares, greens = [], 0
    for row in found:
        if row.get("skip"):
            out.append(f"{row['commit'][:12]} not replayed: {row['skip']}")
            continue
        now = today(repo, work, row, select)
        total = now and now["selected"] + now["skipped"]
        if not now or not total:
            out.append(f"{row['commit'][:12]} no report to select from ({row.get('error', 'see its log')})")
            continue
        part = now["selected"] / total
        shares.append(part)
        greens += len(now["false_green"])
        then = row.get("selected", 0) + row.get("skipped", 0)
        own = f"{row['selected'] / then:.0%}, {len(row.get('false_green') or [])} fg" if then else "-"
        note = (now["everything"] or "")[:70]
        out.append(
            f"{row['commit'][:12]} {now['selected']:>6}/{total:<6}  {part:>5.0%}"
            f"  {len(now['false_green']):>12}  {len(row.get('failed') or []):>6}  {own:>13}"
            f"  {row.get('python', '?'):>6}  {note}"
        )
        out += [f"    false green: {nodeid}" for nodeid in now["false_green"]]
    if shares:
        out.append(f"{len(shares)} commits: {spread(shares)}; false greens {greens}")
    return out


def estimate(repo: Path, count: int, head: str, report: Path, select: dict | None = None) -> list[str]:
    """Selection for each of the last ``count`` commits' diffs (parent to commit) from one report's
    footprints and tests, run nowhere: the share only (no false greens without each commit's run), and the
    footprints are that report's commit's, not each parent's."""
    history = json.loads(report.read_text())
    decoded = footprints.decode(history.get("footprints"))
    if isinstance(decoded, str):
        raise SystemExit(f"{report}: {decoded}")
    tests, unit = list(decoded[0]), split.Groups(history).unit
    out, shares = [], []
    for commit in commits(repo, count, head):
        diff = git(repo, "diff", "--name-status", "-M", "-z", f"{commit}^", commit, "--")
        project = tomllib.loads(git(repo, "show", f"{commit}:pyproject.toml"))
        given = rules.load(
            select if select is not None else project.get("tool", {}).get("harness", {}).get("select")
        )
        made = choose(
            tests, decoded[0], decoded[1], changes.parse(diff), given, unit, "", changes.renames(diff)
        )
        shares.append(len(made.selected) / len(tests))
        out.append(
            f"{commit[:12]} {len(made.selected):>6}/{len(tests):<6} {shares[-1]:>5.0%}"
            f"  {made.everything or ''}"
        )
    out.append(
        f"{len(shares)} diffs, footprints of one run: {spread(shares)}; false greens not known (nothing ran)"
    )
    return out


def replay(
    repo: Path, work: Path, count: int, suite_args: list[str], python: str, head: str, jobs: int = 1
) -> None:
    """Each commit not yet in rows.jsonl: one at a time in shadow since the previous replayed commit, or
    ``jobs`` at a time without selection (the truth and footprints only)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "runs").mkdir(exist_ok=True)
    done = {row["commit"] for row in rows(work)}
    version = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    lock = threading.Lock()

    def write(row: dict) -> None:
        with lock:
            with open(work / "rows.jsonl", "a", encoding="utf-8") as file:
                file.write(json.dumps(row) + "\n")
            print("\n".join(table(repo, work, [row])[1:]), file=sys.stderr)

    def one(job: tuple[dict, Path, list[str], list[str], list[str]]) -> None:
        row, where, args, missing, select = job
        print(f"replay: {row['commit'][:12]} since {row['ref'][:12]}", file=sys.stderr)
        found = run(where, work / "runs" / row["commit"][:12], python, args, select)
        write({**row, **found, "missing": missing})

    pending, queued = [], set()  # queued: their reports come from this replay's own runs
    previous: str | None = None
    for commit in commits(repo, count, head):
        if commit in done:
            previous = commit
            continue
        parent = git(repo, "rev-parse", f"{commit}^").strip()
        history_of = previous or parent
        history = work / "runs" / history_of[:12]
        row: dict = {
            "commit": commit,
            "parent": parent,
            "subject": git(repo, "log", "-1", "--format=%s", commit),
        }
        previous = commit
        where, args, missing = tree(repo, work, commit, suite_args)
        if not (where / "harness" / "select" / "profiler.py").is_file():
            write({**row, "skip": "its harness records no footprints (before selection existed)"})
            continue
        if history_of not in queued and not (history / "report.json").is_file():  # the parent's footprints
            seed, seed_args, _ = tree(repo, work, history_of, suite_args)
            print(f"replay: {history_of[:12]}: footprints of the parent, every test", file=sys.stderr)
            run(seed, history, python, seed_args, [])
        ref = parent if history_of == parent else history_of
        row.update(ref=ref, wider=ref != parent, python=version, shadow=jobs == 1)
        select = ["--changed-since", ref, "--history", str(history), "--shadow"] if jobs == 1 else []
        pending.append((row, where, args, missing, select))
        queued.add(commit)
    if jobs == 1:  # in order: each shadow run reads the previous commit's report
        for job in pending:
            one(job)
        return
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, pending))


def ingest(work: Path, other: Path) -> list[str]:
    """The rows of ``other`` (a work folder filled elsewhere) whose commits ``work`` lacks, with their
    runs' reports and logs; what was added. A row whose history is a commit ``work`` already has keeps the
    history run there (``runs/<commit>-py<version>``, the row's ``history``): the run it is selected from
    and the run that is its truth share a Python and host."""
    have = {row["commit"] for row in rows(work)}
    new = [row for row in rows(other) if row["commit"] not in have]
    (work / "runs").mkdir(parents=True, exist_ok=True)
    for row in new:
        name, ref = row["commit"][:12], row.get("ref", "")[:12]
        if row.get("ref") in have and (other / "runs" / ref).is_dir():  # its history, run there: kept apart
            row["history"] = f"{ref}-py{row.get('python', '')}"
            shutil.copytree(other / "runs" / ref, work / "runs" / row["history"], dirs_exist_ok=True)
        if (other / "runs" / name).is_dir():
            shutil.copytree(other / "runs" / name, work / "runs" / name, dirs_exist_ok=True)
        if (other / "runs" / f"{name}.log").is_file():
            shutil.copy2(other / "runs" / f"{name}.log", work / "runs" / f"{name}.log")
    with open(work / "rows.jsonl", "a", encoding="utf-8") as file:
        file.writelines(json.dumps(row) + "\n" for row in new)
    return [f"ingested {row['commit'][:12]} ({row.get('python', '?')})" for row in new]


def in_order(repo: Path, head: str, found: list[dict]) -> list[dict]:
    """The rows oldest first on ``head``'s first-parent line (jobs finish in any order); others last."""
    line = git(repo, "rev-list", "--first-parent", "--reverse", head).split()
    rank = {commit: i for i, commit in enumerate(line)}
    return sorted(found, key=lambda row: rank.get(row["commit"], len(rank)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="worktrees, runs and rows.jsonl go here")
    parser.add_argument("--commits", type=int, default=40, help="how many commits (default 40)")
    parser.add_argument("--head", default="HEAD", help="the last commit of the window (default HEAD)")
    parser.add_argument(
        "--suite-args", default="", help="the suite's test paths and pytest options (one quoted string)"
    )
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--python", default=sys.executable, help="the venv with the test stack")
    parser.add_argument("--table", action="store_true", help="print the rows so far and stop")
    parser.add_argument(
        "--select",
        type=lambda text: tomllib.loads(text),
        help="TOML in place of each commit's [tool.harness.select] (--table, --estimate)",
    )
    parser.add_argument("--estimate", type=Path, help="a report.json: each diff's selection from it, no runs")
    parser.add_argument(
        "--jobs", type=int, default=1, help="commits run at a time, without shadow (default 1)"
    )
    parser.add_argument(
        "--ingest", type=Path, help="another work folder: add its rows and runs, then --table"
    )
    args = parser.parse_args()
    if args.commits < 1 or args.jobs < 1:
        parser.error("--commits, --jobs: at least 1")
    if args.estimate:
        print("\n".join(estimate(args.repo, args.commits, args.head, args.estimate, args.select)))
        return
    work = args.work.resolve()
    if args.ingest:
        print("\n".join(ingest(work, args.ingest.resolve())))
    elif not args.table:
        replay(args.repo, work, args.commits, shlex.split(args.suite_args), args.python, args.head, args.jobs)
    print("\n".join(table(args.repo, work, in_order(args.repo, args.head, rows(work)), args.select)))


if __name__ == "__main__":
    main()
