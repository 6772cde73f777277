"""The user's ``pyproject.toml``: found from a directory upwards, its ``[tool.harness]`` table read."""

from __future__ import annotations

import tomllib
from pathlib import Path

from harness.errors import ConfigError


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest ``pyproject.toml`` from ``start`` (the current directory) upwards."""
    start = (start or Path.cwd()).resolve()
    for directory in (start, *start.parents):
        if (directory / "pyproject.toml").is_file():
            return directory / "pyproject.toml"
    return None


def _tool(pyproject: Path | None) -> dict:
    """The ``[tool]`` table ({} without a file); a broken file names file and line."""
    if pyproject is None:
        return {}
    try:
        with open(pyproject, "rb") as file:
            tool = tomllib.load(file).get("tool", {})
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{pyproject}: invalid TOML: {error}") from None
    except UnicodeDecodeError as error:  # TOML is UTF-8; tomllib decodes before it parses
        raise ConfigError(f"{pyproject}: not UTF-8 (byte {error.start}): TOML files are UTF-8") from None
    except OSError as error:
        raise ConfigError(f"{pyproject}: cannot read: {error.strerror}") from None
    if not isinstance(tool, dict):
        raise ConfigError(f"{pyproject}: [tool] must be a table")
    return tool


def declares_table(pyproject: Path | None) -> bool:
    """Whether the project has a ``[tool.harness]`` table (an empty one too): it asks for the harness."""
    return "harness" in _tool(pyproject)


def read_table(pyproject: Path | None) -> dict:
    """``[tool.harness]`` as a dict ({} without a file or table); a broken file names file and line."""
    table = _tool(pyproject).get("harness", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{pyproject}: [tool.harness] must be a table")
    return table
