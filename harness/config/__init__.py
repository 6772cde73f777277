"""Configuration: the user's ``pyproject.toml``, ``[tool.harness]`` settings, suites and their phases."""
