"""The kept compile cache (``HARNESS_COMPILE_CACHE``): vLLM's and torch inductor's caches in a folder that
CI restores before the tests and saves from the default branch, beside the baseline report.

Compiled graphs are only good for the platform, vLLM and torch that made them, so the kept folder holds one
subfolder per such triple and the run uses its own; the others (an older vLLM's) are removed, so the folder
CI saves does not grow with every upgrade. A variable the user set (``VLLM_CACHE_ROOT``,
``TORCHINDUCTOR_CACHE_DIR``) is left as it is.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from harness.platform.packages import installed
from harness.tracking.compile_cache import INDUCTOR_CACHE_DIR, VLLM_CACHE_ROOT


def name(platform: str, versions: Mapping[str, tuple[str, str] | None]) -> str:
    """The subfolder of one platform, vLLM and torch: ``cpu-vllm0.32.0-torch2.9.0``."""
    label = f"{platform}-" + "-".join(
        f"{package}{(versions.get(package) or ('none', ''))[0]}" for package in ("vllm", "torch")
    )
    return re.sub(r"[^A-Za-z0-9._+-]", "_", label)


def kept(folder: Path, platform: str, env: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """The variables that point this run's engines into the kept folder, and one line saying where; a
    folder that cannot be used (a file, unwritable) is that line and no variables: engines compile as
    without one, the run goes on."""
    try:
        return _kept(folder, platform, env)
    except OSError as error:
        return {}, f"compile cache: {folder}: {error.strerror or error}; engines compile as without one"


def _kept(folder: Path, platform: str, env: Mapping[str, str]) -> tuple[dict[str, str], str]:
    own = name(platform, installed(("vllm", "torch")))
    folder.mkdir(parents=True, exist_ok=True)
    for other in folder.iterdir():  # another version's graphs: never read, not saved again
        if other.name != own and other.name.startswith(f"{platform}-vllm") and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)
    where = (folder / own).resolve()
    where.mkdir(exist_ok=True)
    variables = {VLLM_CACHE_ROOT: str(where / "vllm"), INDUCTOR_CACHE_DIR: str(where / "inductor")}
    given = {key: value for key, value in variables.items() if not env.get(key)}
    left = sorted(set(variables) - set(given))
    line = f"compile cache: {where}" + (f" ({', '.join(left)} set by the user: kept)" if left else "")
    return given, line
