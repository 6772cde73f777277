"""What a report says of the machine and the environment it ran in: versions, allow-listed variables."""

from __future__ import annotations

import platform as host
import subprocess
from collections.abc import Mapping
from pathlib import Path

from harness.ledger.redaction import REDACTED, secret_name
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
    """The allow-listed variables only, never the whole environment; one named like a credential keeps
    its name with the value ``[redacted]`` (the report's other credentials go in ``finalize``)."""
    return {
        name: REDACTED if secret_name(name) and env[name] else env[name]
        for name in sorted(env)
        if name in ENV_NAMES or name.startswith(ENV_PREFIXES)
    }
