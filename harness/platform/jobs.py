"""What a CI job of each platform needs, for both CI generators (``harness.ci``): the agent queue it runs on
by default, the ``docker run`` flags that reach its devices, and the device nodes those flags may name.
Facts of the platforms, kept with them: a new platform adds its line here, not in the generators."""

from __future__ import annotations

QUEUES = {"cuda": "gpu-cuda", "rocm": "gpu-rocm", "xpu": "gpu-xpu", "cpu": "cpu"}
DEFAULT_CELLS = ("cuda", "rocm", "cpu")  # the cells a CI file has by default; xpu when it is named
# How a container reaches the platform's GPUs: the flags vLLM's CUDA and ROCm images are run with.
DEVICE_OPTIONS: dict[str, tuple[str, ...]] = {
    "cuda": ("--gpus", "all", "--ipc", "host"),
    "rocm": ("--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video", "--ipc", "host"),
    "xpu": ("--device", "/dev/dri", "--ipc", "host"),  # Intel GPUs: the DRM render nodes Level Zero opens
    "cpu": (),
}
# --device values a job may name: the GPU nodes (NVIDIA, AMD's KFD, DRM render nodes, RDMA for multi-node)
DEVICE_NODES = ("/dev/nvidia", "/dev/kfd", "/dev/dri", "/dev/infiniband")
RUNTIMES = ("nvidia", "runc")  # --runtime values: NVIDIA's container runtime, or docker's default
