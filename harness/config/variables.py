"""The environment variables ``harness run`` hands each phase's pytest, named once for both sides: the run
sets them, the pytest plugin reads them, and neither imports the other."""

# HARNESS=1 asks the plugin to act in a session, whatever the project's pyproject says
SWITCH = "HARNESS"
# a previous run's configurations, by which the plugin orders the tests (``harness.pytest_plugin.order``)
CONFIGURATIONS = "HARNESS_CONFIGURATIONS"
# that run's package groups, which failures first moves whole beside files (a JSON object {packages:
# [folder, ...]}: harness.split.Groups.packages), written beside it where the run had any
ENGINE_GROUPS = "HARNESS_ENGINE_GROUPS"
# a previous run of the suite (report.json or run directory) as harness run's history; CI's test steps set
# it to what the cache restored (harness.run.history)
HISTORY = "HARNESS_HISTORY"
# per-test timeouts from the history's recorded seconds (harness run --timeouts-from-history): a JSON object
# node id -> seconds, which the plugin gives each test without a timeout of its own (pytest-timeout's marker)
TEST_TIMEOUTS = "HARNESS_TEST_TIMEOUTS"
# a test's value there instead of a fingerprint: it failed on a handed-on engine and passed on fresh ones
# (the safety net's finding type too), so it starts on fresh engines
SENSITIVE = "reuse-sensitive"
# a test's value there instead of a fingerprint: it failed in that run, so a failure on a handed-on engine is
# its own and the safety net does not run it again (no extra start)
FAILED = "failed"
# a folder CI's cache keeps (harness-compile/<suite>-<platform>): harness run points vLLM's and torch
# inductor's compile caches into a folder of it named by platform, vLLM and torch version
# (harness.run.kept_cache), so a build's engines start from the default branch's compiled graphs
COMPILE_CACHE = "HARNESS_COMPILE_CACHE"
# [tool.harness.ci] gpu_free_job: what a generated step does with the GPU-free tests its history lists
# (harness.run.gpu_free_job): "deselect" (a GPU step: they run elsewhere) or "only" (their CPU job)
GPU_FREE = "HARNESS_GPU_FREE"
# the list harness run hands each phase's pytest (a JSON file {mode, source, tests}): the plugin deselects
# them, or keeps only them and fails one that starts a runner (harness.pytest_plugin.cpu_job)
GPU_FREE_TESTS = "HARNESS_GPU_FREE_TESTS"
