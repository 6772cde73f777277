"""The README and docs/ point at what exists: every relative link resolves (file and heading), and the
settings page lists exactly the keys ``Settings`` has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.config.settings import Settings

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(page: Path) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(page: Path) -> set[str]:
    """GitHub's ids for the page's headings: lower case, punctuation dropped, spaces to hyphens."""
    return {
        re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in prose(page)
        if line.startswith("#")
    }


def broken(page: Path) -> list[str]:
    found = []
    for line in prose(page):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):  # not inside inline code
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                found.append(f"{target}: no such file")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                found.append(f"{target}: no such heading")
    return found


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page):
    assert broken(page) == []


def test_a_missing_file_or_heading_is_found(tmp_path):
    (tmp_path / "there.md").write_text("# A heading, with `code`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#a-heading-with-code) [gone](gone.md) [bad](there.md#nope) [web](https://x.org/y)\n"
        "```\n[in a fence](gone.md)\n```\n"
    )
    assert broken(page) == ["gone.md: no such file", "there.md#nope: no such heading"]


def test_the_settings_page_lists_every_key():
    listed = re.findall(r"^\| `(\w+)` \|", (ROOT / "docs" / "settings.md").read_text(), re.MULTILINE)
    assert sorted(listed) == sorted(Settings._fields)
