"""docs/architecture.md names every module of harness/, one line each, and no module that is not there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
ENTRY = re.compile(r"^(?P<indent> *)(?P<name>[\w.]+/?)(?:\s|$)")


def named_in_tree(text: str) -> set[str]:
    """The paths under ``harness/`` that the doc's tree block names: a directory line (``name/``) opens
    a level two spaces deeper; a line indented further than its entry's name continues its description."""
    block = text.split("## The tree, one line per module", 1)[1].split("```", 2)[1]
    names: set[str] = set()
    parents: list[tuple[int, str]] = []  # (indent, directory path) of the open directories
    for line in block.splitlines():
        match = ENTRY.match(line)
        if match is None:
            continue
        indent, name = len(match["indent"]), match["name"]
        while parents and parents[-1][0] >= indent:
            parents.pop()
        if parents and indent != parents[-1][0] + 2:
            continue  # a wrapped description, not an entry
        path = "/".join([p for _, p in parents] + [name.rstrip("/")])
        if name.endswith("/"):
            parents.append((indent, name.rstrip("/")))
        names.add(path)
    return {name for name in names if name.startswith("harness/") or name == "harness"}


def modules() -> set[str]:
    """Every module of the package, by path; a package's ``__init__.py`` is named by its directory line."""
    found = set()
    for path in (ROOT / "harness").rglob("*.py"):
        relative = path.relative_to(ROOT)
        found.add(str(relative.parent) if path.name == "__init__.py" else str(relative))
    return found


def test_every_module_of_harness_is_named_in_the_architecture_tree():
    missing = modules() - named_in_tree(DOC.read_text(encoding="utf-8"))
    assert not missing, f"docs/architecture.md's tree does not name: {sorted(missing)}"


def test_the_tree_names_no_module_that_does_not_exist():
    named = named_in_tree(DOC.read_text(encoding="utf-8"))
    stale = {name for name in named if not (ROOT / name).exists()}
    assert not stale, f"docs/architecture.md names what harness/ does not have: {sorted(stale)}"


def test_the_parser_sees_a_module_left_out_and_one_that_is_gone():
    """The check is a real one: a tree missing a module, or naming one that is not there, is caught."""
    text = DOC.read_text(encoding="utf-8")
    without = "\n".join(line for line in text.splitlines() if not line.startswith("    slots.py "))
    assert "harness/platform/slots.py" in modules() - named_in_tree(without)
    added = text.replace("    slots.py ", "    gone.py              not there\n    slots.py ", 1)
    assert "harness/platform/gone.py" in named_in_tree(added)
