"""In a process a test spawned (``multiprocessing`` spawn, ``vllm serve``): record its runners.

``pytest-gpu-harness.pth`` calls ``watch`` at interpreter start when ``HARNESS_TEST_PROCESS`` is set,
which the plugin sets for its session; nothing else of the harness is imported until the process imports
a runner library (then about 30 ms of the harness's modules, against seconds of vLLM's). The first runner
start then adopts the test's ledger and owner (``starts.adopt``).
"""

from __future__ import annotations

import importlib.abc
import sys

# the packages of the modules harness.tracking.patches wraps (its TARGETS; a unit test keeps them equal):
# the first import of one of them installs the hook, which then wraps the modules as they are imported
WATCHED = frozenset({"vllm", "transformers", "sentence_transformers"})


class _FirstRunnerImport(importlib.abc.MetaPathFinder):
    """Installs the harness's import hook when the process first imports a runner library."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] not in WATCHED:
            return None
        sys.meta_path.remove(self)
        from harness.tracking import patches

        if patches.installed():  # a session's hook asks the other finders itself (this one among them)
            return None
        return patches.install().find_spec(name, path, target)


def watch() -> None:
    if not any(isinstance(finder, _FirstRunnerImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _FirstRunnerImport())
