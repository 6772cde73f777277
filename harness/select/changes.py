"""The files a change touches: ``git diff --name-status -M <merge base>`` (the working tree included) and
the untracked files git does not ignore, as paths relative to the repository's top.

A rename touches its old and its new path, a deletion its old one. An unknown REF or a git that cannot
answer is bad input (``HarnessError``: one line, exit 2); a merge base git cannot find (a shallow clone,
unrelated histories) is ``NoBase``: the run selects everything and says why.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError


class NoBase(Exception):
    """No merge base with REF here: selection cannot know what changed."""


@dataclass(frozen=True)
class Change:
    base: str  # the merge base's commit
    top: Path  # the repository's top folder
    files: tuple[str, ...]  # sorted, each once
    renamed: dict[str, str]  # a rename's (or copy's) new path -> its old one


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "-C", str(root), "-c", "core.quotePath=false", *args],
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise HarnessError(f"--changed-since: git cannot run here ({error})") from None


def changed(ref: str, root: Path) -> Change:
    """What changed in ``root``'s repository since ``ref``'s merge base with HEAD (see the module doc)."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise HarnessError(f"--changed-since {ref}: {root} is not in a git repository")
    if ref.startswith("-"):
        raise HarnessError(f"--changed-since {ref!r}: not a revision")
    known = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if known.returncode != 0:
        raise HarnessError(f"--changed-since {ref}: no such revision here (fetch it first)")
    base = _git(root, "merge-base", "HEAD", ref)
    if base.returncode != 0 or not base.stdout.strip():
        shallow = _git(root, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"
        raise NoBase(
            f"no merge base of HEAD and {ref}"
            + (" (a shallow clone: fetch with more depth)" if shallow else "")
        )
    commit = base.stdout.strip()
    diff = _git(root, "diff", "--name-status", "-M", "-z", commit, "--")
    if diff.returncode != 0:
        raise HarnessError(f"--changed-since {ref}: git diff failed: {diff.stderr.strip()[:200]}")
    untracked = _git(root, "ls-files", "--others", "--exclude-standard", "-z")
    files = set(parse(diff.stdout)) | {p for p in untracked.stdout.split("\0") if p}
    return Change(commit, Path(top.stdout.strip()), tuple(sorted(files)), renames(diff.stdout))


def renames(output: str) -> dict[str, str]:
    """A rename's or copy's new path -> its old one, of ``git diff --name-status -z`` output."""
    fields = output.split("\0")
    found, i = {}, 0
    while i < len(fields) and fields[i]:
        if fields[i][:1] in ("R", "C") and i + 2 < len(fields):
            found[fields[i + 2]] = fields[i + 1]
            i += 3
        else:
            i += 2
    return found


def parse(output: str) -> list[str]:
    """The paths of ``git diff --name-status -z`` output: both of a rename's or a copy's."""
    fields = output.split("\0")
    paths, i = [], 0
    while i < len(fields) and fields[i]:
        status = fields[i]
        count = 2 if status[:1] in ("R", "C") else 1
        paths += fields[i + 1 : i + 1 + count]
        i += 1 + count
    return paths
