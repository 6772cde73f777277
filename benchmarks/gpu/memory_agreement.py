"""Backs docs/validation.md § Without vLLM: do harness's NVML readings agree with torch?
``python memory_agreement.py doctor.json`` prints JSON.

Free bytes are compared (NVML's ``used`` includes ~615 MiB the driver reserves, which torch's total omits),
and used/total each within 1 % of torch's view of the same device, matched by UUID.
"""

import json
import sys

import torch


def main() -> None:
    doctor = json.load(open(sys.argv[1]))
    rows = []
    for device in doctor["devices"]:
        index = device["index"]
        free, total = torch.cuda.mem_get_info(index)
        uuid = "GPU-" + str(torch.cuda.get_device_properties(index).uuid)
        used = total - free
        rows.append(
            {
                "index": index,
                "uuid_harness": device["uuid"],
                "uuid_torch": uuid,
                "uuid_match": device["uuid"] == uuid,
                "harness_used": device["used_bytes"],
                "harness_total": device["total_bytes"],
                "torch_used": used,
                "torch_total": total,
                "free_diff_bytes": (device["total_bytes"] - device["used_bytes"]) - free,
                "total_rel_diff": abs(device["total_bytes"] - total) / total,
                "within_1pct": abs(device["total_bytes"] - total) / total <= 0.01
                and abs((device["total_bytes"] - device["used_bytes"]) - free) / total <= 0.01,
            }
        )
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
