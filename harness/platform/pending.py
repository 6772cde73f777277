"""A platform forced by name (``HARNESS_PLATFORM=cuda|rocm``) whose library starts in a thread.

On the H200 host, a cuda session's start waited ~35 ms for NVML: importing pynvml, ``nvmlInit`` and
listing the devices, the one cost the cuda platform adds to the cpu platform's. Its C calls release the
GIL, so in a thread they overlap what pytest does meanwhile (collecting the tests). The name, and so the
platform's settings, is known at once; the first question about devices waits for the thread and raises
what detection raised, as ``detect`` would have.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from harness.errors import HarnessError, PlatformError
from harness.platform.base import Device, MemoryReading, Platform


class PendingPlatform(Platform):
    def __init__(self, name: str, mask_variable: str, env: Mapping[str, str]):
        from harness.platform import detect  # the package imports this module

        self.name, self.mask_variable = name, mask_variable
        self._found: Platform | None = None
        self._error: HarnessError | None = None

        def find() -> None:
            try:
                self._found = detect(env).platform
            except HarnessError as error:  # anything else is a bug: the thread's own report shows it
                self._error = error

        self._thread = threading.Thread(target=find, name="harness-detect", daemon=True)
        self._thread.start()

    def ready(self) -> Platform:
        """The backend detection found, once the thread is done."""
        self._thread.join()
        if self._error is not None:
            raise type(self._error)(str(self._error))  # a new one each time: a raise extends the traceback
        if self._found is None:
            raise PlatformError(f"detecting the {self.name} platform failed (see the harness-detect thread)")
        return self._found

    def devices(self) -> list[Device]:
        return self.ready().devices()

    def memory(self) -> dict[int, MemoryReading]:
        return self.ready().memory()

    def process_memory(self, pids: set[int]) -> dict[int, int]:
        return self.ready().process_memory(pids)
