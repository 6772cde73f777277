"""The environment variables ``harness run`` hands each phase's pytest, named once for both sides: the run
sets them, the pytest plugin reads them, and neither imports the other."""

# HARNESS=1 asks the plugin to act in a session, whatever the project's pyproject says
SWITCH = "HARNESS"
# a previous run's configurations, by which the plugin orders the tests (``harness.pytest_plugin.order``)
CONFIGURATIONS = "HARNESS_CONFIGURATIONS"
# a test's value there instead of a fingerprint: it failed on a handed-on engine and passed on fresh ones
# (the safety net's finding type too), so it starts on fresh engines
SENSITIVE = "reuse-sensitive"
