"""The pytest glue: the entry point (``plugin``, entry point ``harness``) registers the other modules, one
role each, only in a session that asked for the harness."""

from harness.config.variables import CONFIGURATIONS

__all__ = ["CONFIGURATIONS"]
