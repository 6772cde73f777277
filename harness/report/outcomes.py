"""A run's exit code from its phases' pytest exit codes."""

from __future__ import annotations

NO_TESTS = 5  # pytest.ExitCode.NO_TESTS_COLLECTED, without importing pytest into the CLI


def worst(exit_codes: list[int]) -> int:
    """The run's exit code: the worst phase's, where 5 (no tests collected) is not a failure."""
    return max((0 if code == NO_TESTS else code for code in exit_codes), default=0)
