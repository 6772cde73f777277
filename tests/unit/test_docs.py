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


CLAIM = re.compile(r"(?:(README\.md|docs/[\w/.-]+\.md) )?§ ")


def backed(script: Path) -> list[str]:
    """The headings ``script``'s opening names (``Backs docs/x.md § Heading``), each checked against its page:
    the problems found, or that it names none."""
    opening = " ".join(script.read_text()[:700].split())
    if "Backs " not in opening:
        return ["names no claim it backs"]
    problems, page = [], None
    for found in CLAIM.finditer(opening):
        page = found.group(1) or page
        if page is None:
            problems.append("§ without a page")
            continue
        headings = {line.lstrip("#").strip() for line in prose(ROOT / page) if line.startswith("#")}
        rest = opening[found.end() :]
        if not any(rest.startswith(heading) for heading in headings):
            problems.append(f"{page} has no heading at the start of {rest[:40]!r}")
    return problems or ([] if page else ["names no page and heading"])


SCRIPTS = sorted(p for p in (ROOT / "benchmarks").rglob("*") if p.suffix in (".py", ".sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[str(p.relative_to(ROOT)) for p in SCRIPTS])
def test_every_benchmark_opens_with_the_claim_it_backs(script):
    assert backed(script) == []


def test_a_claim_under_a_missing_heading_is_found(tmp_path):
    script = tmp_path / "x.py"
    script.write_text('"""Backs docs/measurements.md § Shards and § No such section: prints it."""\n')
    assert backed(script) == [
        'docs/measurements.md has no heading at the start of \'No such section: prints it."""\''
    ]
    script.write_text('"""Prints a figure."""\n')
    assert backed(script) == ["names no claim it backs"]


def test_the_ledger_table_names_every_field_the_checker_declares():
    """docs/architecture.md's ledger table and harness.ledger.check.FIELDS, the one declaration of each
    event's fields (the reader checks every line against it), name the same fields."""
    from harness.ledger.check import FIELDS

    rows = {
        found.group(1): found.group(2)
        for found in re.finditer(
            r"^\| `([\w-]+)` \| (.*) \|$", (ROOT / "docs" / "architecture.md").read_text(), re.M
        )
    }
    missing = {
        event: sorted(name for name in fields if f"`{name}`" not in rows.get(event, ""))
        for event, fields in FIELDS.items()
    }
    assert {event: names for event, names in missing.items() if names} == {}
