"""Runners of the other processes of a test worker, as live holders here: a ``vllm serve`` a fixture
spawned, the engine a spawned child built, or, seen from those, the worker's own.

Each process keeps its own holders; the ledger is what they share. Before a start, the runners the
family's other files record as started, not stopped, and still written by a live process, become holders
of this process, so a start whose declared share does not fit beside them is blocked naming them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.ledger.owner import Owner
from harness.ledger.reader import live_runners
from harness.memory.admission import Holder

if TYPE_CHECKING:
    from harness.ledger.records import Record
    from harness.tracking.context import Context

KEY = "other-process"  # the first item of such a holder's key


def refresh(context: Context) -> None:
    """Make the live runners of the worker's other processes this process's holders, dropping those that
    stopped since."""
    writer = context.writer
    if writer is None:
        return
    holders = context.holders
    for holder in holders.on():
        if isinstance(holder.key, tuple) and holder.key[0] == KEY:
            holders.release(holder.key)
    devices = {d.uuid: (d.index, d.total_bytes) for d in context.platform.devices()}
    own = {holder.key for holder in holders.on()}  # a forked child's include its parent's runners
    for path, record in live_runners(writer.directory, writer.worker, writer.path):
        if record["id"] not in own:  # counted once: not again as "of another process"
            holders.hold(_holder(path, record, devices))


def _holder(path: Path, record: Record, devices: dict[str, tuple[int, int]]) -> Holder:
    here = [devices[uuid] for uuid in record.get("devices") or () if uuid in devices] or list(
        devices.values()
    )
    declared = record.get("need_bytes")
    total = min(total for _, total in here) if here else 0
    used = record.get("held_after_start") or {}
    # the share the runner declared, as it declared it: its bytes over this process's reading of the
    # device's total drift with that reading (node 0 read 0.41 for a server's declared 0.5)
    share = record.get("fraction")
    if share is None and declared and total:  # a ledger written before runner-start had the field
        share = round(declared / total, 4)
    return Holder(
        key=(KEY, path.name, record["id"]),
        label=f"{record['kind']} runner `{record['model']}` of another process ({path.name})",
        owner=Owner(*(record.get(name) for name in Owner._fields)),  # type: ignore[arg-type]
        devices=tuple(index for index, _ in here),
        used_bytes={devices[u][0]: b for u, b in used.items() if u in devices},
        fraction=share,
        declared_bytes=declared,
    )
