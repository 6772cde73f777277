"""The fake machine's file, rewritten while another thread polls it (as the memory sampler does)."""

from __future__ import annotations

import threading

from tests import fakes
from tests.fakes import gpu


def test_a_poller_never_reads_a_half_written_machine(tmp_path, monkeypatch):
    path = tmp_path / "fake_gpus.json"
    machine = [gpu(n, used=n) for n in range(64)]  # a file of some kilobytes: writing it takes a while
    fakes.write(path, machine)
    monkeypatch.setenv("FAKE_GPUS_FILE", str(path))
    done, failures = threading.Event(), []

    def poll():
        while not done.is_set():
            try:
                assert len(fakes.devices()) == 64
            except Exception as error:  # a truncated or empty file: JSONDecodeError
                failures.append(error)
                return

    poller = threading.Thread(target=poll)
    poller.start()
    for used in range(2000):
        machine[0]["used"] = used
        fakes.write(path, machine)
    done.set()
    poller.join()
    assert failures == []
