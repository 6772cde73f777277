"""The pytest glue: the entry point (``plugin``, entry point ``harness``) registers the recorder and the
worker pinning, with per-platform timeouts, only in a session that asked for the harness."""
