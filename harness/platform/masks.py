"""Visible-devices variables (``CUDA_VISIBLE_DEVICES``, ``HIP_VISIBLE_DEVICES``, ``ROCR_VISIBLE_DEVICES``).

A mask is read the way the CUDA runtime reads it: comma-separated device indices or ``GPU-`` UUIDs (a
unique prefix is enough); unset means every device, an empty string none; a negative index (``-1``) ends
the list, so ``-1`` alone hides every device. Where the runtime would silently drop the rest of the list
(an unparsable entry, an index past the count, a repeat), we raise instead: a mask that hides devices by
accident is a CI bug worth one clear line.

Integers index the devices in PCI bus id order, which is the order NVML and amdsmi enumerate in and the
order CUDA uses under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. Without it CUDA orders fastest-first; on the
identical GPUs of a CI host both orders agree, and CI sets ``PCI_BUS_ID`` where they would not.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.errors import DeviceMaskError

# every variable that hides devices from a process: NVIDIA, AMD (ROCR filters, HIP indexes) and Intel GPUs
VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")


def normalise_bus_id(bus_id: str) -> str:
    """``00000000:1B:00.0`` (NVML) and ``0000:1b:00.0`` (amdsmi) → ``0000:1b:00.0``, so they compare."""
    domain, bus, rest = bus_id.strip().split(":")
    device, function = rest.split(".")
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16)}"


def visible(variable: str, value: str | None, uuids: Sequence[str]) -> list[int]:
    """Positions in ``uuids`` (the devices in PCI bus id order) that the mask makes visible, in visible order.

    AMD UUIDs carry no ``GPU-`` prefix in amdsmi; a ``GPU-`` entry is matched against them with it added.
    """
    if value is None:
        return list(range(len(uuids)))
    if value.strip() == "":
        return []
    chosen: list[int] = []
    for entry in (part.strip() for part in value.split(",")):
        position = _position(variable, value, entry, uuids)
        if position is None:
            break
        if position in chosen:
            raise DeviceMaskError(f"{variable}={value!r}: device {entry!r} is listed twice")
        chosen.append(position)
    return chosen


def _position(variable: str, value: str, entry: str, uuids: Sequence[str]) -> int | None:
    """One entry → its position in ``uuids``; None for a negative index, which ends the list."""
    if entry.isascii() and entry.lstrip("-").isdigit():  # "０" is a digit to Python, not to CUDA
        index = int(entry)
        if index < 0:
            return None
        if index >= len(uuids):
            raise DeviceMaskError(
                f"{variable}={value!r}: index {index} is past the {len(uuids)} device(s) of this machine"
            )
        return index
    if entry.upper().startswith("GPU-") and len(entry) > 4:
        prefix = entry.lower()
        matches = [i for i, uuid in enumerate(uuids) if _with_prefix(uuid).lower().startswith(prefix)]
        if len(matches) == 1:
            return matches[0]
        problem = "matches no device" if not matches else f"matches {len(matches)} devices"
        raise DeviceMaskError(f"{variable}={value!r}: UUID {entry!r} {problem}")
    raise DeviceMaskError(f"{variable}={value!r}: {entry!r} is neither a device index nor a GPU- UUID")


def _with_prefix(uuid: str) -> str:
    return uuid if uuid.upper().startswith("GPU-") else f"GPU-{uuid}"
