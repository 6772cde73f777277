"""Cost of one memory poll of every visible device through harness's platform layer (median of many)."""

import json
import statistics
import time

from harness.platform import detect


def main(polls: int = 5000) -> None:
    platform = detect().platform
    platform.memory()  # initialise the library outside the timing
    times = []
    for _ in range(polls):
        started = time.perf_counter_ns()
        platform.memory()
        times.append(time.perf_counter_ns() - started)
    devices = len(platform.devices())
    median, p90 = statistics.median(times) / 1000, sorted(times)[int(0.9 * polls)] / 1000
    print(json.dumps({"platform": platform.name, "devices": devices, "median_us": median, "p90_us": p90}))


if __name__ == "__main__":
    main()
