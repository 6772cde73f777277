"""Fake management libraries for hardware this machine lacks: ``pynvml`` (nvidia-ml-py) and ``amdsmi``.

They keep the real libraries' function names, return shapes and units (NVML and amdsmi's bytes APIs in
bytes, ``amdsmi_get_gpu_vram_usage`` in MiB) so the platform layer runs unchanged over them. Select them
with ``HARNESS_NVML_MODULE=tests.fakes.pynvml`` or ``HARNESS_AMDSMI_MODULE=tests.fakes.amdsmi`` (repo root
on ``sys.path``).

Devices come from the environment, re-read on every call so a test can change ``used`` between polls:

- ``FAKE_GPUS``: a JSON list of ``{"name", "uuid", "bus", "total", "used"}`` (``total``/``used`` in bytes,
  ``bus`` a PCI address such as ``"0000:1b:00.0"``), in the library's enumeration order, and optionally
  ``"processes": {"<pid>": bytes}``, what the per-process calls report (a part of ``used``); or
- ``FAKE_GPUS_FILE``: the path of a file holding that JSON, for subprocesses (pytester, xdist workers)
  whose environment a test cannot change after the start: the test rewrites the file instead, with
  ``write``, so a reader polling at the same moment (the memory sampler's thread) never sees it half-written.

With neither set, initialising the library fails the way it does on a machine without the driver.
``FAKE_AMDSMI_BYTES_API=0`` makes amdsmi's bytes memory calls answer "not supported", as on older
amdsmi builds, so only the MiB call is left.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def configured() -> bool:
    """Whether a fake machine is described at all (else the fake library behaves as not installed)."""
    return "FAKE_GPUS" in os.environ or "FAKE_GPUS_FILE" in os.environ


def devices() -> list[dict]:
    """The fake machine's devices as described now (file first, so a test can rewrite it)."""
    path = os.environ.get("FAKE_GPUS_FILE")
    text = Path(path).read_text() if path else os.environ.get("FAKE_GPUS", "[]")
    return json.loads(text)


def write(path: Path, devices: list[dict]) -> None:
    """Replace the fake machine's file in one step: a reader sees the old devices or the new, never a part."""
    new = Path(f"{path}.new")
    new.write_text(json.dumps(devices))
    os.replace(new, path)


def gpu(number: int, *, total: int = 80 * 2**30, used: int = 0, name: str = "NVIDIA H100 80GB HBM3") -> dict:
    """One fake device with a UUID and PCI bus id derived from ``number`` (bus 0x10 + number)."""
    return {
        "name": name,
        "uuid": f"GPU-{number:08x}-1111-2222-3333-{number:012x}",
        "bus": f"0000:{0x10 + number:02x}:00.0",
        "total": total,
        "used": used,
    }
