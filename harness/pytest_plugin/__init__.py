"""The pytest glue: the entry point (``plugin``, entry point ``harness``) registers the recorder and the
worker pinning, with per-platform timeouts, only in a session that asked for the harness."""

# where ``harness run`` points the workers at a previous run's configurations (``order``): named here, so a
# session without the variable never imports the ordering module
CONFIGURATIONS = "HARNESS_CONFIGURATIONS"
