"""``harness doctor`` run as the real CLI in a subprocess, over fake NVML/amdsmi and the real host."""

import importlib.metadata as metadata
import json
import os
import subprocess
import sys

import pytest

from harness.platform.host import NODE0_MEMINFO
from tests.conftest import PLATFORM_VARIABLES
from tests.fakes import gpu

GIB = 2**30
NO_GPU = {
    "HARNESS_NVML_MODULE": "tests.fakes.absent",
    "HARNESS_AMDSMI_MODULE": "tests.fakes.absent",
    "HARNESS_XPU_MODULE": "tests.fakes.absent",
}


def doctor(*args, **env):
    """Run ``python -m harness doctor``; the fake_gpus fixture (when used) has set os.environ already."""
    full = {**os.environ, **env}
    for variable in [name for name, value in env.items() if value is None]:
        del full[variable]
    return subprocess.run(
        [sys.executable, "-m", "harness", "doctor", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=60,
    )


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    for variable in PLATFORM_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(tmp_path)  # no pyproject: the suites come from the one we write in a test


def test_cpu_json_shows_host_and_numa_memory():
    result = doctor("--json", **NO_GPU)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["platform"] == "cpu"
    assert found["reason"] == (
        "no GPU: tests.fakes.absent not installed; tests.fakes.absent not installed; "
        "tests.fakes.absent not installed"
    )
    assert found["mask"] is None
    (device,) = found["devices"]
    assert device["uuid"] == "cpu" and device["total_bytes"] > 0
    assert found["host_memory"]["total_bytes"] >= device["total_bytes"]
    if NODE0_MEMINFO.exists():
        assert found["numa_node0_memory"]["total_bytes"] == device["total_bytes"]
    else:
        assert found["numa_node0_memory"] is None
    assert found["sessions"] == ["tests", "lint"]


def test_versions_come_from_package_metadata():
    found = json.loads(doctor("--json", HARNESS_PLATFORM="cpu").stdout)["versions"]
    assert found["pytest"] == pytest.__version__
    assert found["pytest-xdist"] == metadata.version("pytest-xdist")
    assert found["python"] == ".".join(map(str, sys.version_info[:3]))
    # label, its distribution, how doctor shows the version; either may be missing (the GPU host runs
    # harness from a checkout)
    for label, distribution, shown in (
        ("harness", "pytest-gpu-harness", "{} (pytest-gpu-harness)"),
        ("amdsmi", "amdsmi", "{}"),
    ):
        try:
            assert found[label] == shown.format(metadata.version(distribution))
        except metadata.PackageNotFoundError:
            assert found[label] == "not installed"
    assert set(found) == {
        "python", "torch", "vllm", "transformers", "sentence-transformers", "nvidia-ml-py", "amdsmi",
        "pytest", "pytest-xdist", "pytest-timeout", "harness",
    }  # fmt: skip


def test_doctor_imports_neither_torch_nor_vllm():
    code = (
        "import sys; from harness.cli import main; main(['doctor', '--json']); "
        "print([m for m in ('torch', 'vllm', 'transformers') if m in sys.modules], file=sys.stderr)"
    )
    env = {**os.environ, "HARNESS_PLATFORM": "cpu"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.stderr.strip() == "[]"


def test_table_output_on_cpu():
    result = doctor(HARNESS_PLATFORM="cpu", COLUMNS="160")
    assert result.returncode == 0, result.stderr
    for text in ("platform", "HARNESS_PLATFORM=cpu", "host memory", "NUMA node 0 memory", "visible devices",
                 "pytest-timeout", "nox sessions that fit"):  # fmt: skip
        assert text in result.stdout


def test_cuda_devices_with_mask(fake_gpus):
    devices = [gpu(0, used=3 * GIB), gpu(1, used=5 * GIB), gpu(2, used=7 * GIB)]
    fake_gpus(devices)
    result = doctor("--json", CUDA_VISIBLE_DEVICES="2,0")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["platform"] == "cuda"
    assert found["reason"] == "NVML answered: 3 GPU(s), driver 580.159.04 (tests.fakes.pynvml)"
    assert found["mask"] == {"variable": "CUDA_VISIBLE_DEVICES", "value": "2,0"}
    assert [(d["index"], d["physical"], d["uuid"], d["used_bytes"]) for d in found["devices"]] == [
        (0, 2, devices[2]["uuid"], 7 * GIB),
        (1, 0, devices[0]["uuid"], 3 * GIB),
    ]
    assert "host_memory" not in found


def test_cuda_table_shows_devices(fake_gpus):
    fake_gpus([gpu(0, total=80 * GIB, used=3 * GIB)])
    result = doctor(COLUMNS="200")
    assert result.returncode == 0, result.stderr
    assert "NVIDIA H100 80GB HBM3" in result.stdout
    assert gpu(0)["uuid"] in result.stdout
    assert "3.00 / 80.00 GiB used" in result.stdout


def test_rocm_devices_and_sessions_from_the_suites_table(fake_gpus, tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.harness.suites.pooling]\npaths = ["p"]\n[tool.harness.suites.generation]\npaths = ["g"]\n'
    )
    fake_gpus([gpu(0, total=192 * GIB, used=GIB, name="AMD Instinct MI300X")], vendor="amd")
    found = json.loads(doctor("--json").stdout)
    assert found["platform"] == "rocm"
    assert found["devices"][0]["name"] == "AMD Instinct MI300X"
    assert found["devices"][0]["total_bytes"] == 192 * GIB
    assert found["sessions"] == ["rocm_pooling", "rocm_generation", "tests", "lint"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"HARNESS_PLATFORM": "bogus"},
            "harness: error: HARNESS_PLATFORM='bogus': expected one of cuda, rocm, xpu, cpu",
        ),
        (
            {"HARNESS_PLATFORM": "cuda", "CUDA_VISIBLE_DEVICES": "abc", **NO_GPU},
            "harness: error: HARNESS_PLATFORM=cuda but NVML does not answer "
            "(tests.fakes.absent not installed)",
        ),
    ],
)
def test_errors_are_one_line_and_exit_2(env, message):
    result = doctor(**env)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", message + "\n")


def test_bad_mask_on_a_gpu_machine_is_one_line(fake_gpus):
    fake_gpus([gpu(0)])
    result = doctor("--json", HARNESS_PLATFORM="cuda", CUDA_VISIBLE_DEVICES="abc")
    assert result.returncode == 2
    assert result.stderr == (
        "harness: error: CUDA_VISIBLE_DEVICES='abc': 'abc' is neither a device index nor a GPU- UUID\n"
    )


def test_forced_cuda_when_the_library_fails_to_initialise(fake_gpus, monkeypatch):
    fake_gpus([gpu(0)])
    monkeypatch.delenv("FAKE_GPUS_FILE")
    result = doctor(HARNESS_PLATFORM="cuda")
    assert result.returncode == 2
    assert result.stderr == (
        "harness: error: HARNESS_PLATFORM=cuda but NVML does not answer "
        "(tests.fakes.pynvml: NVML Shared Library Not Found)\n"
    )
