"""What a report says of the machine and the environment it ran in: versions, allow-listed variables."""

from __future__ import annotations

import platform as host
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from harness.platform.packages import installed

# The environment is copied by allow-list only: device masks, platform and harness settings.
ENV_NAMES = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "VLLM_TARGET_DEVICE",
        "VLLM_CPU_KVCACHE_SPACE",
        "VLLM_CPU_OMP_THREADS_BIND",
        "OMP_NUM_THREADS",
        "HF_HUB_OFFLINE",
        "PYTEST_XDIST_AUTO_NUM_WORKERS",
        "BUILDKITE_PARALLEL_JOB",
        "BUILDKITE_PARALLEL_JOB_COUNT",
    }
)
ENV_PREFIXES = ("HARNESS_",)
# A variable named like a credential: its value is shown as REDACTED, and redacted wherever it appears.
SECRET = re.compile(
    r"TOKEN|SECRET|PASSW(OR)?D|CREDENTIAL|AUTH|API_?KEY|PRIVATE|(^|_)(PAT|KEY|PWD)(_|$)", re.IGNORECASE
)
# user:password@ (or token@) in a URL: https://user:token@host/simple
URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")
REDACTED = "[redacted]"
SHORTEST_SECRET = 8  # shorter values (on, true, a tag name) would redact ordinary text and markup


def versions(tree: Path) -> dict:
    """Versions from package metadata (never importing torch or vllm) and the tested tree's commit."""
    found: dict = {"python": host.python_version()}
    for label, provided in installed(("harness", "torch", "vllm", "transformers")).items():
        found[label] = provided and provided[0]
    try:
        git = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True, timeout=10, check=False
        )
        found["git_commit"] = git.stdout.strip() if git.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        found["git_commit"] = None
    return found


def environment(env: Mapping[str, str]) -> dict:
    """The allow-listed variables only, never the whole environment; credentials redacted."""
    return {
        name: REDACTED if SECRET.search(name) else redact(env[name], env)
        for name in sorted(env)
        if name in ENV_NAMES or name.startswith(ENV_PREFIXES)
    }


def redact(text: str, env: Mapping[str, str]) -> str:
    """``text`` without URL credentials and without the value of any variable named like a secret."""
    text = URL_CREDENTIALS.sub(lambda match: match["scheme"] + REDACTED + "@", text)
    for name, value in env.items():
        if SECRET.search(name) and len(value) >= SHORTEST_SECRET and value in text:
            text = text.replace(value, REDACTED)
    return text


def redact_all(value, env: Mapping[str, str]):
    """Every string in a JSON-like value (keys too) through ``redact``."""
    if isinstance(value, str):
        return redact(value, env)
    if isinstance(value, dict):
        return {redact_all(key, env): redact_all(item, env) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact_all(item, env) for item in value]
    return value
