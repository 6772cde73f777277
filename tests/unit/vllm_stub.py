"""The stub vLLM of test_patches.py as a plugin (``pytest_plugins``): its ``run_with_stub`` fixture, for the
reuse tests that run suites over it."""

from tests.unit.test_patches import run_with_stub

__all__ = ["run_with_stub"]
