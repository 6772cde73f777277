"""The environment variables ``harness run`` hands each phase's pytest, named once for both sides: the run
sets them, the pytest plugin reads them, and neither imports the other."""

# HARNESS=1 asks the plugin to act in a session, whatever the project's pyproject says
SWITCH = "HARNESS"
# a previous run's configurations, by which the plugin orders the tests (``harness.pytest_plugin.order``)
CONFIGURATIONS = "HARNESS_CONFIGURATIONS"
