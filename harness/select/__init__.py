"""Test selection by evidence (issue 59): each test's footprint (the files whose code ran for it), the files
a change touches, and the tests that meet them. Pure logic and the footprint recorder; ``harness run``
(``--changed-since``, ``--shadow``) and the pytest plugin drive it."""

# harness run -> each phase's pytest: the file that lists what selection leaves out
SELECTION = "HARNESS_SELECTION"
# a pipeline's test steps -> harness run: "shadow" or "on" on a pull request's build (harness ci writes it);
# "off": no selection, no footprints (recording them slows a 3.11 interpreter: docs/selection.md)
SELECT = "HARNESS_SELECT"
PIPELINE_MODES = ("off", "on", "shadow")
