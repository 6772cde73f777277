"""docs/architecture.md names every module of harness/, one line each, and no module that is not there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
ENTRY = re.compile(r"^(?P<indent> *)(?P<name>[\w.]+/?)(?:\s|$)")


def named_in_tree(text: str) -> set[str]:
    """The paths under ``harness/`` that the doc's tree block names (see ``listed_in_tree``)."""
    return set(listed_in_tree(text))


def listed_in_tree(text: str) -> list[str]:
    """The paths under ``harness/`` that the doc's tree block names, in its order: a directory line
    (``name/``) opens a level two spaces deeper; a line indented further than its entry's name continues
    its description."""
    block = text.split("## The tree, one line per module", 1)[1].split("```", 2)[1]
    names: list[str] = []
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
        names.append(path)
    return [name for name in names if name.startswith("harness/") or name == "harness"]


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
HF_ADAPTER = "harness/tracking/hf/"  # the HF adapter, in the vLLM adapter's shape
HF_NAME = re.compile(r"^(transformers|sentence_transformers)(\.\w+)+$")


def vllm_names(source: str, pattern: re.Pattern[str] = VLLM_NAME) -> list[str]:
    """vLLM module names (``vllm.entrypoints.llm``; another library's by ``pattern``) as strings in code:
    docstrings are prose and skipped."""
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
        and pattern.match(node.value)
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


def test_only_the_hf_adapter_names_the_hf_libraries_modules():
    """As for vLLM: import-linter's "only the HF adapter imports transformers and sentence-transformers"
    keeps their imports in ``tracking/hf/``; their module names in strings are checked here."""
    found = {
        str(path.relative_to(ROOT)): names
        for path in (ROOT / "harness").rglob("*.py")
        if not str(path.relative_to(ROOT)).startswith(HF_ADAPTER)
        and (names := vllm_names(path.read_text(encoding="utf-8"), HF_NAME))
    }
    assert found == {}
    adapter = [
        vllm_names(path.read_text(encoding="utf-8"), HF_NAME) for path in (ROOT / HF_ADAPTER).glob("*.py")
    ]
    assert any(adapter)


def test_a_vllm_name_in_code_is_seen_and_one_in_a_docstring_is_not():
    source = '"""Wraps ``vllm.entrypoints.llm``."""\n\nMODULE = "vllm.v1.engine.async_llm"\n'
    assert vllm_names(source) == ["vllm.v1.engine.async_llm"]


def test_one_module_per_name():
    """A name says one role: no two modules of the package share a file name (``baseline``, ``shards``,
    ``summary`` each named two or three modules once)."""
    from collections import Counter

    names = Counter(
        path.name
        for path in (ROOT / "harness").rglob("*.py")
        if path.name != "__init__.py" and not str(path.relative_to(ROOT)).startswith(HF_ADAPTER)
    )
    assert [name for name, count in names.items() if count > 1] == []


def test_the_hf_adapter_mirrors_the_vllm_adapters_roles():
    """The one exception to a name per role: the HF adapter's modules are named for the vLLM adapter's
    modules of the same role (``wrap``, ``key``, ``health``, ``parking``, ``tables``), and no other."""
    hf = {path.name for path in (ROOT / HF_ADAPTER).glob("*.py")}
    vllm = {path.name for path in (ROOT / ADAPTER).glob("*.py")}
    assert hf <= vllm and {"wrap.py", "key.py", "parking.py"} <= hf
    others = {path.name for path in (ROOT / "harness").rglob("*.py")} - {
        path.name for path in (ROOT / ADAPTER).rglob("*.py")
    }
    assert hf & others - {"__init__.py"} == set()


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


def test_no_module_of_harness_is_over_400_lines():
    long = {
        str(path.relative_to(ROOT)): lines
        for path in (ROOT / "harness").rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert long == {}


def _import_graph() -> dict[str, set[str]]:
    """Each module of harness/ (dotted) and the harness modules it imports anywhere in it (a function's
    import too: a cycle dodged inside a function is still a cycle); ``from package import module`` is the
    module, as import-linter reads it."""
    import ast

    paths = {}
    for path in (ROOT / "harness").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names)
        graph[name] = {module for module in found if module in paths and module != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (its modules in order), or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the path now, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph[module]):
            if state.get(imported) == 1:
                return path[path.index(imported) :] + [imported]
            if imported not in state and (found := visit(imported)):
                return found
        state[module] = 2
        path.pop()
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return []


def test_harness_has_no_import_cycle():
    assert _cycle(_import_graph()) == []


def test_the_cycle_check_sees_a_cycle_inside_a_function():
    graph = {"a": {"b"}, "b": {"c"}, "c": set()}
    assert _cycle(graph) == []
    graph["c"].add("a")
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert "harness.tracking.hf.parking" in _import_graph()["harness.tracking.hf.wrap"]  # a function's import


def test_each_adapters_modules_import_downwards_in_the_docs_order():
    """The doc lists each adapter's modules bottom first ("its modules import downwards in this order");
    a module imports only those of its package listed before it."""
    listed = listed_in_tree(DOC.read_text(encoding="utf-8"))
    graph = _import_graph()
    for adapter in (ADAPTER, HF_ADAPTER):
        paths = [path for path in listed if path.startswith(adapter)]
        on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / adapter).glob("*.py") if p.name != "__init__.py"}
        assert set(paths) == on_disk
        order = [path.removesuffix(".py").replace("/", ".") for path in paths]
        upward = {
            module: sorted(i for i in graph[module] if i in order[order.index(module) :])
            for module in order
            if any(i in order[order.index(module) :] for i in graph[module])
        }
        assert upward == {}, adapter


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _private_reads(source: str) -> list[str]:
    """``module._name`` where ``module`` is a harness module this source imports: another module's private
    state (``sys.modules`` with a harness module's name is another way in, seen too)."""
    import ast

    tree = ast.parse(source)
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(
                a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("harness")
            )
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness"):
            modules = [a for a in node.names if _is_module(f"{node.module}.{a.name}")]  # not a class's name
            imported.update(a.asname or a.name for a in modules)
    found = [
        f"{node.value.id}.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in imported
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
    ]
    return found + [
        node.slice.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript)
        and ast.unparse(node.value) == "sys.modules"
        and isinstance(node.slice, ast.Constant)
        and str(node.slice.value).startswith("harness.")
    ]


def test_no_module_reads_another_harness_modules_private_state():
    """The reuse seam's rule (issue 57 item 5) for every module: ``_forking`` once read starts' private
    state through ``sys.modules``."""
    found = {
        str(path.relative_to(ROOT)): reads
        for path in (ROOT / "harness").rglob("*.py")
        if (reads := _private_reads(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_private_state_check_sees_a_read():
    assert _private_reads("from harness.tracking import starts\nstarts._local.active\n") == ["starts._local"]
    assert _private_reads('import sys\nsys.modules["harness.tracking.starts"]\n') == [
        "harness.tracking.starts"
    ]
    assert _private_reads("from harness.tracking import starts\nstarts.starting\nself._x\n") == []


def test_each_reuse_handle_implements_only_its_own_kinds_members():
    """``Closing`` members on the vLLM engine's handle, ``Opened`` members on the HF model's, and neither
    the other's (no stub that answers for a kind it is not)."""
    import dataclasses

    from harness.tracking.handles import Closing, Handle, Opened
    from harness.tracking.hf.parking import Model
    from harness.tracking.vllm.parking import Engine

    def own(protocol: type) -> set[str]:
        return {name for name in vars(protocol) if not name.startswith("_")}

    def members(handle: type) -> set[str]:
        return set(dir(handle)) | {field.name for field in dataclasses.fields(handle)}

    assert own(Handle) | own(Closing) <= members(Engine) and not own(Opened) & members(Engine)
    assert own(Handle) | own(Opened) <= members(Model) and not own(Closing) & members(Model)
    assert own(Closing) and own(Opened)


def _writes(source: str, event: str) -> bool:
    """Whether ``source`` calls a ``write`` with ``event`` first (a ledger writer's event)."""
    import ast

    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "write"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == event
        for node in ast.walk(ast.parse(source))
    )


def test_one_module_writes_reuse_refusals():
    """One place builds and writes a refusal: the pool (``reuse.Pool.refused``); the ledger's reader and
    checker only name the event."""
    writers = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "harness").rglob("*.py")
        if _writes(path.read_text(encoding="utf-8"), "reuse-refused")
    }
    assert writers == {"harness/tracking/reuse.py"}
    assert _writes('writer.write("reuse-refused", reason="x")', "reuse-refused")
