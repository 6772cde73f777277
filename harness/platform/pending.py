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

from harness.errors import HarnessError
from harness.platform.base import Device, MemoryReading, Platform


class PendingPlatform(Platform):
    def __init__(self, name: str, mask_variable: str, env: Mapping[str, str]):
        self.name, self.mask_variable = name, mask_variable
        self._env = env
        self._found: Platform | None = None
        self._error: HarnessError | None = None
        self._thread = threading.Thread(target=self._find, name="harness-detect", daemon=True)
        self._thread.start()

    def _find(self) -> None:
        try:
            self._found = _detect(self._env)
        except HarnessError as error:  # anything else is a bug: the thread's own report shows it
            self._error = error

    def ready(self) -> Platform:
        """The backend detection found, once the thread is done. A thread that left no answer (a fork
        while it ran leaves the child without it) is answered here, in this thread."""
        self._thread.join()
        if self._error is not None:
            raise type(self._error)(str(self._error))  # a new one each time: a raise extends the traceback
        if self._found is None:
            self._found = _detect(self._env)
        return self._found

    def devices(self) -> list[Device]:
        return self.ready().devices()

    def memory(self) -> dict[int, MemoryReading]:
        return self.ready().memory()

    def process_memory(self, pids: set[int]) -> dict[int, int]:
        return self.ready().process_memory(pids)


def _detect(env: Mapping[str, str]) -> Platform:
    from harness.platform import detect  # the package imports this module

    return detect(env).platform
