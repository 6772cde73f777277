"""Backs docs/measurements.md § Catching the live engine: prints the seconds from a blocked runner start to
its error, the harness's admission check vs a plain memory wait.

The machine is a fake 80 GiB GPU (tests/fakes/pynvml over FAKE_GPUS_FILE) on which a module-scoped
engine declared and took 0.92 of the memory and never gives it back while the module runs, the shape of
vLLM PR #52570. A second engine at 0.92 then
- with the harness: fails in admission, naming the holder, right after one garbage collection (a fixture
  owns the holder, so waiting ``block_grace_s`` could not free it);
- without it: waits the way vLLM's tests/utils.py ``wait_for_gpu_memory_to_clear`` does (poll NVML used
  every 5 s against a threshold, give up after 240 s), here ``harness.memory.wait_for_memory`` with
  the same poll and timeout over the same fake NVML.
Run: ``python benchmarks/leak_detection.py [--plain-timeout 240]`` (real seconds; lower it for a quick
look, the plain figure is then capped at that value and says so).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plain-timeout", type=float, default=240.0, help="vLLM CI's wait (default 240 s)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="leak-detection-"))
    sys.path.insert(0, str(ROOT))
    from tests.fakes import gpu

    gpus = work / "gpus.json"
    gpus.write_text(json.dumps([gpu(0, total=80 * GIB, used=GIB // 2)]))
    os.environ.update(
        FAKE_GPUS_FILE=str(gpus),
        HARNESS_NVML_MODULE="tests.fakes.pynvml",
        HARNESS_AMDSMI_MODULE="tests.fakes.absent",
    )
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    from harness import ledger
    from harness.errors import MemoryTimeout, RunnerBlocked
    from harness.memory.waits import wait_for_memory
    from harness.tracking import context
    from tests.unit.runner_suites.fake_runner import FakeRunner

    here = context.current()
    here.writer = ledger.LedgerWriter(work / "ledger", worker="main")
    here.owner.enter_test("tests/models/test_colbert.py::test_colbert_shared", "tests/models/test_colbert.py")
    here.owner.enter_fixture("colbert_model", "module")
    shared = FakeRunner("colbert", gpu_memory_utilization=0.92)  # alive until the module ends
    here.owner.leave_fixture()
    here.owner.enter_test("tests/models/test_colbert.py::test_colbert_own", "tests/models/test_colbert.py")

    began = time.monotonic()
    try:
        FakeRunner("colbert", gpu_memory_utilization=0.92)
    except RunnerBlocked as error:
        harness_s, harness_error = time.monotonic() - began, str(error)

    platform = here.platform
    total = platform.devices()[0].total_bytes
    began = time.monotonic()
    try:
        wait_for_memory(
            platform, [0], threshold_bytes=int(total * 0.08), timeout_s=args.plain_timeout, poll_s=5.0
        )
    except MemoryTimeout as error:
        plain_s, plain_error = time.monotonic() - began, str(error)
    shared.close()

    capped = (
        ""
        if args.plain_timeout >= 240
        else f"  (capped by --plain-timeout {args.plain_timeout:g}; CI waits 240)"
    )
    print(f"{'check':<34}{'seconds to error':>18}")
    print(f"{'harness admission':<34}{harness_s:>18.2f}")
    print(f"{'plain memory wait (vLLM shape)':<34}{plain_s:>18.2f}{capped}")
    print(f"\nharness: {harness_error}\nplain:   {plain_error}")


if __name__ == "__main__":
    main()
