"""Backs docs/validation.md § Reuse that never changes an outcome (test_forked's cause): the CUDA platform's
memory read in a child forked from the process that initialized NVML (real pynvml), with this tree's
NvidiaPlatform and, given ``--old FILE``, with an older nvidia.py; and what cuda_fork's probe reads in a
child forked after ``torch.cuda.is_available()``. Prints one line per reading.

    python3 benchmarks/gpu/nvml_fork.py [--old OLD_NVIDIA_PY]
"""

import argparse
import importlib.util
import os

import pynvml


def in_child(what: str, read) -> None:
    pid = os.fork()
    if pid == 0:
        try:
            said = read()
        except Exception as error:  # noqa: BLE001 (the child's error is the reading)
            said = f"{type(error).__name__}: {error}"
        print(f"forked child, {what}: {said}", flush=True)
        os._exit(0)
    os.waitpid(pid, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", help="an older harness/platform/nvidia.py to compare")
    old = parser.parse_args().old
    pynvml.nvmlInit()
    from harness.platform.nvidia import NvidiaPlatform

    kinds = {"this tree": NvidiaPlatform}
    if old:
        spec = importlib.util.spec_from_file_location("old_nvidia", old)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        kinds["old nvidia.py"] = module.NvidiaPlatform
    for name, kind in kinds.items():
        platform = kind(pynvml)
        print(f"parent, {name}: used {platform.memory()[0].used_bytes} bytes", flush=True)
        in_child(f"{name}", lambda platform=platform: f"used {platform.memory()[0].used_bytes} bytes")
    import torch

    from harness.platform import cuda_fork

    torch.cuda.is_available()
    print(f"parent after torch.cuda.is_available(): driver initialized {cuda_fork.driver_initialized()}")
    in_child("cuda_fork.driver_initialized()", cuda_fork.driver_initialized)


if __name__ == "__main__":
    main()
