"""harness: runs GPU model test suites on CUDA, ROCm and CPU, and accounts for every runner start."""

__version__ = "0.1.0"
