"""On a GPU host: whether the NVIDIA driver's listing names the GPUs as NVML does, and whether a cuda session
that starts no runner then runs without NVML.

    python3 benchmarks/gpu/driver_listing.py   (after env.sh's install_project, on the device machine)

Prints the driver's UUIDs beside NVML's (under each mask of one GPU too), then runs 20 trivial tests under
``pytest --harness`` with ``HARNESS_PLATFORM=cuda`` and prints whether that process imported pynvml, its
threads at the end, and the devices its ledger's ``worker`` event names. Exit 1 where they disagree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the trivial suite

from trivial import ARGS, suite  # noqa: E402

from harness.ledger import events  # noqa: E402
from harness.platform import detect, detect_later  # noqa: E402
from harness.platform.nvidia import driver_listing  # noqa: E402

SESSION = """
import json, sys, threading, pytest
code = pytest.main(sys.argv[1:])
print(json.dumps({"code": int(code), "pynvml": "pynvml" in sys.modules, "threads": threading.active_count()}))
"""


def main() -> int:
    listing = driver_listing()
    nvml = detect({**os.environ, "HARNESS_PLATFORM": "cuda"}).platform.uuids()
    print(f"driver's listing: {listing}\nNVML:             {nvml}")
    agreed = listing == nvml
    for index in range(len(nvml)):
        env = {**os.environ, "HARNESS_PLATFORM": "cuda", "CUDA_VISIBLE_DEVICES": str(index)}
        named, listed = detect_later(env).uuids(), detect(env).platform.uuids()
        print(f"CUDA_VISIBLE_DEVICES={index}: named {named}, NVML {listed}")
        agreed &= named == listed
    with tempfile.TemporaryDirectory() as directory:
        ledger = Path(directory) / "ledger"
        done = subprocess.run(
            [sys.executable, "-c", SESSION, *ARGS, "--harness", f"--harness-ledger-dir={ledger}"],
            cwd=suite(Path(directory), 20),
            env={**os.environ, "HARNESS_PLATFORM": "cuda"},
            capture_output=True,
            text=True,
            check=False,
        )
        session = json.loads(done.stdout.strip().splitlines()[-1])
        [worker] = [event for event in events(ledger / "main.jsonl") if event["event"] == "worker"]
    print(
        f"a cuda session of 20 trivial tests: exit {session['code']}, pynvml imported: {session['pynvml']}, "
        f"threads at the end: {session['threads']}, its worker event's devices: {worker['devices']}"
    )
    agreed &= session["code"] == 0 and not session["pynvml"] and worker["devices"] == nvml
    print("agreed" if agreed else "DISAGREED")
    return 0 if agreed else 1


if __name__ == "__main__":
    sys.exit(main())
