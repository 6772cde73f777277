"""``harness run``: a suite's phases in order, one pytest process each, sharded on request."""
