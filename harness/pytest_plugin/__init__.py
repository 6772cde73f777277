"""The pytest glue: the recorder (entry point ``harness``) and worker pinning (entry point
``harness_workers``), with per-platform timeouts."""
