"""Platform facts live in harness/platform/ only (facts.py): no other module lists platforms or tests a
platform's name, and what the others read there is what they used to hold."""

from __future__ import annotations

import ast
from pathlib import Path

from harness.config.settings import load_settings
from harness.platform import FACTS, GPU_PLATFORMS, PLATFORMS, VLLM_BACKENDS
from harness.platform.host import HostPlatform

ROOT = Path(__file__).resolve().parents[2]
NAMES = set(PLATFORMS)


def _facts_outside_platform(source: str) -> list[str]:
    """What in ``source`` is a platform fact: a collection that names two platforms or more, or a
    comparison of something's ``.name`` with a platform's name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict):
            items = node.keys if isinstance(node, ast.Dict) else node.elts
            named = [i.value for i in items if isinstance(i, ast.Constant) and i.value in NAMES]
            if len(named) > 1:
                found.append(f"line {node.lineno}: {named}")
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Attribute)
            and node.left.attr == "name"
        ):
            named = [c.value for c in node.comparators if isinstance(c, ast.Constant) and c.value in NAMES]
            if named:
                found.append(f"line {node.lineno}: .name == {named[0]!r}")
    return found


def test_no_module_outside_platform_lists_platforms_or_tests_a_platforms_name():
    found = {
        str(path.relative_to(ROOT)): facts
        for path in (ROOT / "harness").rglob("*.py")
        if not str(path.relative_to(ROOT)).startswith("harness/platform/")
        and (facts := _facts_outside_platform(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_check_sees_a_list_of_platforms_and_a_name_test():
    source = 'GPUS = ("cuda", "rocm")\nif platform.name == "cpu":\n    pass\nCPU = ("cpu",)\n'
    assert _facts_outside_platform(source) == ["line 1: ['cuda', 'rocm']", "line 2: .name == 'cpu'"]


def test_the_facts_are_what_the_modules_held():
    assert PLATFORMS == ("cuda", "rocm", "xpu", "cpu") and GPU_PLATFORMS == ("cuda", "rocm", "xpu")
    assert VLLM_BACKENDS == {"cuda": "cuda", "rocm": "rocm", "xpu": "intel", "cpu": "cpu"}
    host = HostPlatform()
    assert (host.gpu, host.engine_memory_measured, host.cuda_fork_guard) == (False, False, False)
    assert [name for name, facts in FACTS.items() if facts.cuda_fork_guard] == ["cuda"]
    assert FACTS["cpu"].vllm_memory_utilization == 0.3
    settings = {name: load_settings(name, None, env={}) for name in PLATFORMS}
    assert [name for name, s in settings.items() if s.settle] == ["rocm", "xpu"]
    assert settings["rocm"].test_timeout_s == 1800.0 and settings["cuda"].test_timeout_s == 900.0
    assert settings["cpu"].release_tolerance_gib == 2.0 and settings["cuda"].release_tolerance_gib == 0.5


def test_the_noxfile_makes_a_session_per_platform_of_the_facts_tagged_gpu_where_it_is_one():
    """The noxfile reads facts.py (its own table says only how each platform's stack is installed)."""
    import json
    import subprocess
    import sys

    listed = subprocess.run(
        [sys.executable, "-m", "nox", "-l", "--json", "-t", "cpu", "gpu"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    sessions = {s["name"]: set(s["tags"]) for s in json.loads(listed.stdout)}
    for name in PLATFORMS:
        assert ("gpu" in sessions[f"{name}_pooling"]) == (name in GPU_PLATFORMS)
