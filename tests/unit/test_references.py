"""References computed once across workers and runs, and afresh when what they depend on changes.

Real processes share the cache folder (as the xdist workers of a run do); the reference function counts
its calls in a file, so a result read from the cache is one the function was not called for.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from harness import references
from harness.config.settings import load_settings
from harness.platform.host import HostPlatform
from harness.tracking import context

COMPUTE = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path

    def embed(model):
        with open(os.environ["CALLS"], "a") as log:
            log.write("call\\n")
        time.sleep(0.5)  # long enough for a second worker to arrive while the first computes
        return {"model": Path(model, "weights.bin").read_bytes().hex(), "pid": os.getpid()}

    if __name__ == "__main__":
        from harness import references
        print(references.reference(embed, sys.argv[1])["model"])
    """
)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A model folder, the counting reference as a module, and a private cache folder."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.bin").write_bytes(b"\x01\x02")
    (tmp_path / "refmod.py").write_text(COMPUTE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _workers(project, count: int) -> list[str]:
    """``count`` processes asking for the same reference at once; their outputs."""
    command = [sys.executable, "refmod.py", str(project / "model")]
    env = {
        "PYTHONPATH": f"{project}:{sys.path[0]}",
        "XDG_CACHE_HOME": str(project / "cache"),
        "CALLS": str(project / "calls"),
        "HOME": "/",
    }
    started = [
        subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    return [process.communicate(timeout=120)[0].strip() for process in started]


def _calls(project) -> int:
    return len((project / "calls").read_text().splitlines()) if (project / "calls").exists() else 0


def test_the_workers_of_a_run_compute_a_reference_once(project):
    assert _workers(project, 3) == ["0102"] * 3
    assert _calls(project) == 1


def test_a_later_run_reads_it_and_changed_model_files_compute_it_afresh(project):
    _workers(project, 1)
    _workers(project, 1)
    assert _calls(project) == 1
    (project / "model" / "weights.bin").write_bytes(b"\x03")
    assert _workers(project, 1) == ["03"]
    assert _calls(project) == 2


def test_a_torn_cache_file_is_computed_again(project):
    _workers(project, 1)
    (pickled,) = (project / "cache" / "harness" / "references").glob("*.pickle")
    pickled.write_bytes(pickled.read_bytes()[:5])
    assert _workers(project, 1) == ["0102"]
    assert _calls(project) == 2


def _key(**change):
    given = {"device_kind": "cuda:NVIDIA H200", "versions": {"torch": "2.11.0", "transformers": "5.17.0"}}
    given.update(change)
    return references.key(references.device_kind, "def f(): ...", ("m",), {}, **given)


def test_the_key_changes_with_library_versions_device_kind_and_source():
    assert _key() == _key()
    assert _key(versions={"torch": "2.12.0", "transformers": "5.17.0"}) != _key()
    assert _key(device_kind="cuda:NVIDIA H100 80GB HBM3") != _key()
    assert (
        references.key(
            references.device_kind,
            "def f(): return 1",
            ("m",),
            {},
            **{"device_kind": "cuda:NVIDIA H200", "versions": {"torch": "2.11.0", "transformers": "5.17.0"}},
        )
        != _key()
    )


def test_turned_off_it_computes_every_time(project):
    here = context.Context(HostPlatform(), load_settings("cpu", None, env={"HARNESS_CACHE_REFERENCES": "0"}))
    replaced = context.use(here)
    try:
        calls = []
        for _ in range(2):
            references.reference(calls.append, 1)
        assert calls == [1, 1]
    finally:
        context.use(replaced)
    assert not (project / "cache").exists()


def test_the_same_model_saved_into_another_folder_is_the_same_reference(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "weights.bin").write_bytes(b"\x01")
    given = {"device_kind": "cpu:cpu", "versions": {}}
    keyed = [references.key(references.device_kind, "", (str(tmp_path / n),), {}, **given) for n in "ab"]
    assert keyed[0] == keyed[1]
    (tmp_path / "b" / "weights.bin").write_bytes(b"\x02")
    assert references.key(references.device_kind, "", (str(tmp_path / "b"),), {}, **given) != keyed[0]
