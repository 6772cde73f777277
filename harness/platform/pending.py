"""A platform forced by name (``HARNESS_PLATFORM=cuda|rocm``) whose library starts only when needed.

On the H200 host a cuda session's start waited ~35 ms for NVML: importing pynvml, ``nvmlInit`` and
listing the devices, the one cost the cuda platform adds to the cpu platform's. Given the driver's own
list of its GPUs (``nvidia.driver_listing``), the devices are named from it and NVML starts at the first
question about memory, which a session that starts no runner never asks. Without that list the library
starts in a thread: its C calls release the GIL, so they overlap what pytest does meanwhile (collecting
the tests). Either way the name, and so the platform's settings, is known at once; the first question the
library must answer waits for it and raises what detection raised, as ``detect`` would have.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from harness.errors import HarnessError, PlatformError
from harness.platform import masks
from harness.platform.base import Device, MemoryReading, Platform


class PendingPlatform(Platform):
    mask_variable: str  # a GPU platform's, always

    def __init__(
        self, name: str, mask_variable: str, env: Mapping[str, str], listing: list[str] | None = None
    ):
        """``listing``: the UUIDs of the devices in their library's order, known without the library."""
        self.name, self.mask_variable = name, mask_variable
        self._env, self._listing = env, listing
        self._found: Platform | None = None
        self._error: HarnessError | None = None
        self._thread: threading.Thread | None = None
        if listing is None:
            self._thread = threading.Thread(target=self._find, name="harness-detect", daemon=True)
            self._thread.start()

    def _find(self) -> None:
        try:
            self._found = _detect(self._env)
        except HarnessError as error:  # anything else is a bug: the thread's own report shows it
            self._error = error

    def ready(self) -> Platform:
        """The backend detection found, once the thread is done, or detected now where none ran. A thread
        that left no answer (a fork while it ran leaves the child without it) is answered here too."""
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise type(self._error)(str(self._error))  # a new one each time: a raise extends the traceback
        if self._found is None:
            self._found = self._agreed(_detect(self._env))
        return self._found

    def _agreed(self, found: Platform) -> Platform:
        """``found``, once its visible devices are those the listing named (and a session recorded)."""
        if self._listing is not None and found.uuids() != self.uuids():
            raise PlatformError(
                f"the driver lists the visible GPUs as {', '.join(self.uuids())}, "
                f"its management library as {', '.join(found.uuids())}"
            )
        return found

    def uuids(self) -> list[str]:
        if self._listing is None:
            return self.ready().uuids()
        chosen = masks.visible(self.mask_variable, self._env.get(self.mask_variable), self._listing)
        return [self._listing[position] for position in chosen]

    def devices(self) -> list[Device]:
        return self.ready().devices()

    def memory(self) -> dict[int, MemoryReading]:
        return self.ready().memory()

    def process_memory(self, pids: set[int]) -> dict[int, int]:
        return self.ready().process_memory(pids)


def _detect(env: Mapping[str, str]) -> Platform:
    from harness.platform import detect  # the package imports this module

    return detect(env).platform
