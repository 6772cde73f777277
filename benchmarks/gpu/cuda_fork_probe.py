"""Backs docs/validation.md § A forked engine after CUDA init: what the driver says (harness.platform.
cuda_fork) against torch's flag, before and after ``torch.cuda.is_available()``, and what a child forked
after it gets from its first CUDA call. Prints one line per reading.

    python3 benchmarks/gpu/cuda_fork_probe.py
"""

import os

import torch

from harness.platform import cuda_fork


def said(where: str) -> None:
    print(
        f"{where}: libcuda mapped {cuda_fork.mapped_driver() is not None}, driver initialized "
        f"{cuda_fork.driver_initialized()}, torch.cuda.is_initialized() {torch.cuda.is_initialized()}",
        flush=True,
    )


said("after import torch")
torch.cuda.is_available()
said("after torch.cuda.is_available()")
pid = os.fork()
if pid == 0:
    try:
        torch.zeros(1, device="cuda")
        print("forked child: its first CUDA call succeeded", flush=True)
    except Exception as error:  # noqa: BLE001 (the child's error is the reading)
        print(f"forked child: {type(error).__name__}: {str(error).splitlines()[0]}", flush=True)
    os._exit(0)
os.waitpid(pid, 0)
torch.zeros(1, device="cuda")
said("after torch.zeros(1, device='cuda')")
