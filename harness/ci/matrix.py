"""The one platform × suite definition both CI generators print, from ``[tool.harness.ci]``.

Buildkite and GitHub Actions get their cells from here so the two can never disagree on which nox sessions
exist or which container a cell runs in, and every name or value that ends up in YAML, a docker flag or a
shell command is checked once, here.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from harness import split
from harness.config.pyproject import find_pyproject, read_table
from harness.config.suites import parse_suite, run_dir
from harness.config.validate import Bounds, expected, fields_of, hints, known
from harness.errors import ConfigError, HarnessError
from harness.platform import PLATFORMS
from harness.platform.jobs import DEFAULT_CELLS, DEVICE_NODES, DEVICE_OPTIONS, QUEUES, RUNTIMES
from harness.platform.packages import installed
from harness.report.compare import Gate
from harness.select import PIPELINE_MODES
from harness.split import MAX_SHARDS

# The docker run flags both CI systems can express (GitHub's container options, Buildkite's docker plugin).
DEVICE_FLAGS = ("--gpus", "--device", "--group-add", "--ipc", "--shm-size", "--runtime")
# What a pull request's [tool.harness.ci] may not mount (model_cache) into a GPU container: the system's
# directories, the container runtime's socket and state, the CI agent's own; nor a directory holding one.
SYSTEM_PATHS = (
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root",
    "/run", "/sbin", "/sys", "/usr", "/var/run", "/var/lib/docker", "/var/lib/containerd",
    "/var/lib/buildkite-agent", "/var/lib/kubelet", "/var/log", "/var/spool", "/var/mail",
    "/etc/buildkite-agent", "/opt/actions-runner", "/snap",
)  # fmt: skip
_NODES = "a GPU device node under " + ", ".join(DEVICE_NODES)
MOST_MINUTES = 7 * 24 * 60  # a job's timeout: a week is far past any CI's own limit; more is a typo
MODEL_CACHE = "/model-cache"  # the containers' HF_HOME, where [tool.harness.ci] model_cache is mounted
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")  # also a valid Buildkite step key, artifact and nox name
# Values that reach docker flags in YAML and a shell: no space, quote or `$` (Buildkite interpolates `$`).
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")
_VALUE = re.compile(r"[A-Za-z0-9/._:=,@+-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PATH = re.compile(r"/[A-Za-z0-9/._+-]*")  # no ':' or ',': it becomes a docker volume "path:MODEL_CACHE"
_BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
CACHE_BACKENDS = ("s3", "gcs", "azure", "fs")  # the Buildkite cache plugin's own backends
_SAFE = "letters, digits and / . _ : = , @ + - only"
_SAFE_PATH = "letters, digits and / . _ + - only"


@dataclass(frozen=True)
class CiSettings:
    """``[tool.harness.ci]``: what the generated pipelines run where."""

    platforms: tuple[str, ...] = DEFAULT_CELLS
    suites: tuple[str, ...] = ()  # empty: every suite in [tool.harness.suites]
    queues: dict[str, str] = field(default_factory=lambda: dict(QUEUES))
    prebuilt_image: bool = False  # the agent image already has the test dependencies: nox --no-venv
    # what harness run's own --shard parser takes: a generated step it then refused would fail every job
    parallelism: Annotated[int, Bounds(1, MAX_SHARDS)] = 1
    timeout_in_minutes: Annotated[int, Bounds(1, MOST_MINUTES)] = 180
    retry_limit: Annotated[int, Bounds(0, 10)] = 2  # Buildkite's range
    images: dict[str, str] = field(default_factory=dict)  # platform -> image its cells run in
    device_options: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEVICE_OPTIONS))
    env: dict[str, str] = field(default_factory=dict)  # set in every container
    model_cache: str | None = None  # host directory mounted at MODEL_CACHE, the containers' HF_HOME
    # the compare step after a suite's jobs: its gates (e.g. "starts") in builds that compare with the
    # baseline; the branches whose builds keep it (empty: the default branch); Buildkite's cache backend
    fail_on_regression: tuple[str, ...] = ()
    baseline_branches: tuple[str, ...] = ()
    cache_backend: str = "s3"
    # the GPU-free tests that a GPU cell's history lists (report.gpu_free, and those that passed on this
    # job last time) run in a CPU job of their own, deselected from the GPU steps; no history: nothing moves
    gpu_free_job: bool = False
    # HARNESS_SELECT in every test step: a pull request's build selects since its base branch, in shadow
    # (every test runs, the false greens recorded) or for real ("on"); a branch's build runs every test
    # and refreshes the footprints in the history it keeps (docs/selection.md § In CI)
    select: str = "shadow"

    def container(self, platform: str) -> Container | None:
        """The container a cell of ``platform`` runs in, or None: it runs on the agent itself."""
        if platform not in self.images:
            return None
        env = {"HF_HOME": MODEL_CACHE} if self.model_cache else {}
        flags = self.device_options[platform]
        return Container(
            image=self.images[platform],
            options=tuple(zip(flags[::2], flags[1::2], strict=True)),
            env={**env, **self.env},
            volumes=(f"{self.model_cache}:{MODEL_CACHE}",) if self.model_cache else (),
        )


CI_KINDS = hints(CiSettings)


@dataclass(frozen=True)
class Container:
    """An image and the docker flags a cell runs it with; every value is checked by ``load``."""

    image: str
    options: tuple[tuple[str, str], ...]  # (flag, value) pairs from DEVICE_FLAGS
    env: dict[str, str]
    volumes: tuple[str, ...]

    def docker_flags(self) -> list[str]:
        """The same as ``docker run`` flags, e.g. for GitHub's ``container.options``."""
        flags = [part for option in self.options for part in option]
        flags += [part for name, value in self.env.items() for part in ("--env", f"{name}={value}")]
        return flags + [part for volume in self.volumes for part in ("--volume", volume)]


@dataclass(frozen=True)
class Cell:
    """One platform × suite: one nox session, one CI job (or Buildkite parallel group)."""

    platform: str
    suite: str

    @property
    def session(self) -> str:
        return f"{self.platform}_{self.suite}"

    @property
    def key(self) -> str:
        return f"{self.platform}-{self.suite}"

    @property
    def run_dir(self) -> str:
        return run_dir(self.suite, self.platform)

    def shard_dirs(self, parallelism: int) -> str:
        """The run directories of the cell's jobs as a glob (one per shard: ``harness run``'s default)."""
        return (
            run_dir(self.suite, self.platform, split.name("*", parallelism))
            if parallelism > 1
            else self.run_dir
        )


def check_name(kind: str, value: str) -> str:
    """A name that reaches YAML keys and shell commands: letters, digits, ``_`` and ``-`` only."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise HarnessError(
            f"{kind} name {value!r} is not allowed: use letters, digits, '_' and '-' (starting with a letter "
            "or digit)"
        )
    return value


def load(pyproject: Path | None = None, ci_from: str | None = None) -> tuple[CiSettings, tuple[str, ...]]:
    """``[tool.harness.ci]`` and the suite names of ``[tool.harness.suites]`` from the nearest pyproject;
    with ``ci_from`` (``--ci-settings``: the base branch's pyproject.toml), ``[tool.harness.ci]`` from there,
    so a pull request cannot choose its own jobs' queues, images, mounts, device flags or environment."""
    tool = read_table(pyproject or find_pyproject())
    if ci_from:
        if not Path(ci_from).is_file():
            raise ConfigError(f"--ci-settings {ci_from}: no such file (the base branch's pyproject.toml)")
        tool = {**tool, "ci": read_table(Path(ci_from)).get("ci", {})}
    suites = tool.get("suites", {})
    if not isinstance(suites, dict):
        raise ConfigError("[tool.harness] suites: expected tables [tool.harness.suites.<name>]")
    for name, table in suites.items():
        check_name("[tool.harness.suites] suite", name)
        for phase in parse_suite(name, table).phases:  # a broken suite fails here, not on every agent
            check_name(f"[tool.harness.suites.{name}] phase", phase.name)
    table = tool.get("ci", {})
    if not isinstance(table, dict):
        raise ConfigError(f"[tool.harness] ci: expected a table [tool.harness.ci], got {table!r}")
    return _settings(table), tuple(suites)


def cells(
    settings: CiSettings, known_suites: tuple[str, ...], platforms: str | None, suites: str | None
) -> list[Cell]:
    """The cells for ``--platforms`` / ``--suites`` (comma-separated), defaulting to the settings."""
    chosen_platforms = _split(platforms, "--platforms") or settings.platforms
    for platform in chosen_platforms:
        if platform not in PLATFORMS:
            check_name("platform", platform)
            raise HarnessError(f"platform {platform!r} is not one of {', '.join(PLATFORMS)}")
    chosen_suites = _split(suites, "--suites") or settings.suites or known_suites
    if not chosen_suites:
        raise HarnessError("no suites: define [tool.harness.suites.<name>] in pyproject or pass --suites")
    for suite in chosen_suites:
        check_name("suite", suite)
        if known_suites and suite not in known_suites:
            raise HarnessError(f"suite {suite!r} is not in [tool.harness.suites] ({', '.join(known_suites)})")
    return [Cell(platform, suite) for platform in chosen_platforms for suite in chosen_suites]


def _split(value: str | None, option: str) -> tuple[str, ...]:
    if value is None:
        return ()
    names = tuple(part.strip() for part in value.split(","))
    if not all(names):
        raise HarnessError(f"{option} {value!r} has an empty name")
    repeated = next((name for name in names if names.count(name) > 1), None)
    if repeated:
        raise HarnessError(f"{option} {value!r} names {repeated!r} twice (one CI cell each)")
    return names


def _settings(table: dict) -> CiSettings:
    where = "[tool.harness.ci]"
    values = fields_of(where, table, CI_KINDS)
    queues = values.pop("queues", {})
    known("[tool.harness.ci.queues]", queues, PLATFORMS)
    for platform, queue in queues.items():
        check_name(f"[tool.harness.ci.queues] {platform} queue", queue)
    for key in ("platforms", "suites"):
        for name in values.get(key, ()):
            check_name(f"{where} {key[:-1]}", name)
        if len(set(values.get(key, ()))) < len(values.get(key, ())):
            expected(f"{where} {key}", "names listed once each", list(values[key]))
    for platform in values.get("platforms", ()):
        if platform not in PLATFORMS:
            expected(f"{where} platforms", f"names from {', '.join(PLATFORMS)}", platform)
    _check_containers(values)
    _check_baseline(values)
    if values.get("select", "shadow") not in PIPELINE_MODES:
        expected(f"{where} select", " or ".join(repr(mode) for mode in PIPELINE_MODES), values["select"])
    device_options = {**DEVICE_OPTIONS, **values.pop("device_options", {})}
    return CiSettings(queues={**QUEUES, **queues}, device_options=device_options, **values)


def _check_containers(values: dict) -> None:
    """images, device_options, env and model_cache: values that reach docker flags, YAML and a shell."""
    for key in ("images", "device_options"):
        known(f"[tool.harness.ci.{key}]", values.get(key, {}), PLATFORMS)
    for platform, image in values.get("images", {}).items():
        _match(
            f"[tool.harness.ci.images] {platform}",
            image,
            _IMAGE,
            "an image reference (name:tag or name@digest)",
        )
    for platform, flags in values.get("device_options", {}).items():
        label = f"[tool.harness.ci.device_options] {platform}"
        if len(flags) % 2 or any(flag not in DEVICE_FLAGS for flag in flags[::2]):
            expected(label, f"flag, value pairs with flags from {', '.join(DEVICE_FLAGS)}", list(flags))
        for value in flags[1::2]:
            _match(label, value, _VALUE, _SAFE)
    for name, value in values.get("env", {}).items():
        _match("[tool.harness.ci.env]", name, _ENV_NAME, "environment variable names")
        _match(f"[tool.harness.ci.env] {name}", value, _VALUE, _SAFE)
    if values.get("model_cache") is not None:
        _match(
            "[tool.harness.ci] model_cache",
            values["model_cache"],
            _PATH,
            f"an absolute path of {_SAFE_PATH}",
        )
        _mountable("[tool.harness.ci] model_cache", values["model_cache"])
    for platform, flags in values.get("device_options", {}).items():
        for flag, value in zip(flags[::2], flags[1::2], strict=True):
            plain = posixpath.normpath(value) == value
            if flag == "--device" and not (plain and value.split(":")[0].startswith(DEVICE_NODES)):
                expected(f"[tool.harness.ci.device_options] {platform} --device", _NODES, value)
            if flag == "--runtime" and value not in RUNTIMES:
                runtimes = " or ".join(RUNTIMES)
                expected(f"[tool.harness.ci.device_options] {platform} --runtime", runtimes, value)


def _mountable(label: str, path: str) -> None:
    """A host directory a pull request may mount into every GPU container: absolute, written plainly (no
    ``.``/``..``/``//``), not a system directory, inside one, or a parent of one (``/`` holds them all)."""
    if posixpath.normpath(path) != path or path.startswith("//"):
        expected(label, "an absolute path written plainly (no '.', '..', '//' or trailing '/')", path)
    for system in SYSTEM_PATHS:
        if path == system or path.startswith(system + "/") or system.startswith(path.rstrip("/") + "/"):
            expected(label, f"a directory for models, not {system} or a directory around it", path)


def _check_baseline(values: dict) -> None:
    """Gates as their canonical spec; branch names and the backend: values that reach YAML and a shell."""
    where = "[tool.harness.ci]"
    gates = []
    for spec in values.get("fail_on_regression", ()):
        try:
            gates.append(Gate.parse(spec).spec)
        except HarnessError:
            expected(f"{where} fail_on_regression", "'starts', 'wall' or 'wall:N%' each", spec)
    if "fail_on_regression" in values:
        values["fail_on_regression"] = tuple(gates)
    for branch in values.get("baseline_branches", ()):
        _match(f"{where} baseline_branches", branch, _BRANCH, "branch names of letters, digits and / . _ -")
    if values.get("cache_backend", "s3") not in CACHE_BACKENDS:
        expected(f"{where} cache_backend", f"one of {', '.join(CACHE_BACKENDS)}", values["cache_backend"])


def _match(label: str, value: str, pattern: re.Pattern, what: str) -> None:
    if not pattern.fullmatch(value):
        expected(label, what, value)


def harness_requirement() -> str:
    """The distribution and version of the harness printing a pipeline, for its steps to install."""
    found = installed(("harness",))["harness"]
    if found is None:
        raise HarnessError("the harness is not installed as a distribution: pip install it to generate steps")
    version, distribution = found
    return f"{distribution}=={version}"
