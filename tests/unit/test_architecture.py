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


ADAPTER = "harness/tracking/vllm/"  # the vLLM adapter: a package, every module of it
VLLM_NAME = re.compile(r"^vllm(\.\w+)+$")


def vllm_names(source: str) -> list[str]:
    """vLLM module names (``vllm.entrypoints.llm``) as strings in code: docstrings are prose and skipped."""
    import ast

    tree = ast.parse(source)
    prose = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in prose
        and VLLM_NAME.match(node.value)
    ]


def test_only_the_vllm_adapter_names_vllms_modules():
    """Imports are import-linter's contract ("only the vLLM adapter imports vllm"); names in strings
    (a module the import hook watches, one read from sys.modules) are checked here."""
    found = {
        str(path.relative_to(ROOT)): names
        for path in (ROOT / "harness").rglob("*.py")
        if not str(path.relative_to(ROOT)).startswith(ADAPTER)
        and (names := vllm_names(path.read_text(encoding="utf-8")))
    }
    assert found == {}
    adapter = [vllm_names(path.read_text(encoding="utf-8")) for path in (ROOT / ADAPTER).glob("*.py")]
    assert any(adapter)  # the check sees them where they are


def test_a_vllm_name_in_code_is_seen_and_one_in_a_docstring_is_not():
    source = '"""Wraps ``vllm.entrypoints.llm``."""\n\nMODULE = "vllm.v1.engine.async_llm"\n'
    assert vllm_names(source) == ["vllm.v1.engine.async_llm"]


def test_one_module_per_name():
    """A name says one role: no two modules of the package share a file name (``baseline``, ``shards``,
    ``summary`` each named two or three modules once)."""
    from collections import Counter

    names = Counter(path.name for path in (ROOT / "harness").rglob("*.py") if path.name != "__init__.py")
    assert [name for name, count in names.items() if count > 1] == []


def _layers_in_doc(text: str) -> list[set[str]]:
    """The doc's layer line (the indented block after "The layers, top to bottom"), top first: each layer
    the set of its roles (``run | ci``)."""
    block = text.split("The layers, top to bottom", 1)[1].split("\n\n", 2)[1]
    line = " ".join(part.strip() for part in block.splitlines())
    return [{name.strip() for name in layer.split("|")} for layer in line.split(">")]


def _layers_in_contract() -> list[set[str]]:
    """The import-linter contract's layers (``[tool.importlinter]`` in pyproject.toml), top first."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    [layers] = [c["layers"] for c in contracts["contracts"] if c["type"] == "layers"]
    return [{name.strip().removeprefix("harness.") for name in layer.split("|")} for layer in layers]


def test_the_docs_layer_list_is_the_import_contracts():
    assert _layers_in_doc(DOC.read_text(encoding="utf-8")) == _layers_in_contract()


def test_the_layer_check_sees_a_layer_left_out():
    text = DOC.read_text(encoding="utf-8")
    assert _layers_in_doc(text.replace(" > memory", "", 1)) != _layers_in_contract()


def _subcommands() -> list[str]:
    """Every ``harness`` subcommand, as typed (``ci buildkite``), from the CLI's own parser."""
    import argparse

    from harness.cli import _parser

    def below(parser: argparse.ArgumentParser, prefix: str) -> list[str]:
        found = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    deeper = below(child, f"{prefix}{name} ")
                    found += deeper or [f"{prefix}{name}"]
        return found

    return below(_parser(), "")


def test_every_harness_subcommand_is_named_in_the_doc():
    text = DOC.read_text(encoding="utf-8")
    commands = _subcommands()
    assert {"run", "ci buildkite", "flaky"} <= set(commands)  # the parser walk finds them
    assert [c for c in commands if f"`harness {c}" not in text] == []
