"""Tracking of runners in this process: who owns them, their starts and stops, the foreign-runner patches,
and the memory sampler. Knows nothing of pytest; the pytest plugin drives it."""
