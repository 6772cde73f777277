"""A light background sampler of device memory, so the timeline shows memory between runner events too.

One daemon thread per pytest process with a ledger reads the platform's memory (one poll of every device)
every ``memory_sample_s`` seconds and appends a ``memory`` event. Samples are flushed, not fsynced: they
are a picture, and the runner events that matter are synced. The first is one interval in: a runner's
events carry their own readings, and a session shorter than an interval (most that start no runner) reads
no memory for a picture of nothing. Any error stops the sampling with a finding, never a traceback in the
user's run: the picture is not worth one.
"""

from __future__ import annotations

import threading

from harness.errors import HarnessError
from harness.ledger.writer import LedgerWriter
from harness.platform import Platform


class MemorySampler:
    def __init__(self, writer: LedgerWriter, platform: Platform, interval_s: float):
        self.writer, self.platform, self.interval_s = writer, platform, interval_s
        self._uuids = dict(enumerate(platform.uuids()))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="harness-memory-sampler", daemon=True)

    def start(self) -> MemorySampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        readings = self.platform.memory()
        used = {self._uuids[i]: r.used_bytes for i, r in readings.items() if i in self._uuids}
        self.writer.write("memory", sync=False, used=used)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception as error:  # the library stopped answering, or broke: say so, stop sampling
                named = isinstance(error, HarnessError)  # ours already say what failed
                message = str(error) if named else f"{type(error).__name__}: {error}"
                self.writer.write("finding", type="sampler-stopped", message=message)
                return
