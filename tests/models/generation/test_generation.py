"""Tiny generation models on vLLM against HF transformers: one vLLM and one HF start per model.

The HF side runs once per model in a session fixture that closes its model before returning (data from
then on; on a GPU in a child process, so vLLM can fork its engine); the vLLM engine is class-scoped and
serves every test of the class, beam widths included. Greedy ids equal to HF's are a float32 claim, so the
engine runs with TF32 off (``ieee_float32``).
"""

import math

import pytest

from harness.references import reference as computed_once
from harness.runners import HfRunner, VllmRunner
from tests.models.conftest import ieee_float32

PROMPTS = [
    "The capital of France is",
    "Once upon a time there was",
    "one two three four",
]
MAX_TOKENS = 8
NUM_LOGPROBS = 5
BEAM_WIDTHS = (1, 2)


def check_logprobs_close(hf, vllm, atol: float = 1e-3) -> None:
    """vLLM's ``check_logprobs_close`` sense, per prompt: where the greedy tokens agree, the logprobs of
    tokens both sides rank must agree; at the first disagreement each side's token must be in the other's
    top-k (a near tie), and the sequences are not compared past it. vLLM's side holds ``Logprob``s."""
    for index, ((hf_ids, _, hf_steps), (vllm_ids, _, vllm_logprobs)) in enumerate(zip(hf, vllm, strict=True)):
        vllm_steps = [{token: lp.logprob for token, lp in step.items()} for step in vllm_logprobs]
        for step, (hf_id, vllm_id) in enumerate(zip(hf_ids, vllm_ids, strict=False)):
            where = f"prompt {index} step {step}"
            if hf_id != vllm_id:
                assert vllm_id in hf_steps[step], f"{where}: vLLM's {vllm_id} not in HF's top-k"
                assert hf_id in vllm_steps[step], f"{where}: HF's {hf_id} not in vLLM's top-k"
                break
            shared = hf_steps[step].keys() & vllm_steps[step].keys()
            assert hf_id in shared, where
            for token in shared:
                assert math.isclose(hf_steps[step][token], vllm_steps[step][token], abs_tol=atol), where


def hf_reference(model: str) -> dict:
    """Everything the tests compare against, from one float32 HF start (IEEE float32 matmuls)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    with HfRunner(model, dtype="float32") as hf:
        return {
            "perplexity": [_perplexity(hf, prompt) for prompt in PROMPTS],
            "greedy": hf.generate_greedy(PROMPTS, MAX_TOKENS),
            "logprobs": hf.generate_greedy_logprobs_limit(PROMPTS, MAX_TOKENS, NUM_LOGPROBS),
            "beams": {w: hf.generate_beam_search(PROMPTS, w, MAX_TOKENS) for w in BEAM_WIDTHS},
        }


def _perplexity(hf: HfRunner, prompt: str) -> float:
    """``exp`` of minus the mean log-probability of each prompt token after the first, by HF."""
    import torch

    ids = hf.tokenizer(prompt, return_tensors="pt")["input_ids"].to(hf.model.device)
    with torch.no_grad():
        logprobs = torch.log_softmax(hf.model(ids).logits[0, :-1].float(), dim=-1)
    return math.exp(-logprobs.gather(1, ids[0, 1:, None]).mean().item())


@pytest.fixture(scope="session")
def hf_outputs(generation_model, session_cache):
    """The HF reference of a model, computed once a run and kept across runs (``harness.references``; in a
    child process on a GPU)."""
    key = ("hf_outputs", generation_model)
    if key not in session_cache:
        session_cache[key] = computed_once(hf_reference, generation_model)
    return session_cache[key]


@pytest.fixture(scope="class")
def engine(generation_model):
    with ieee_float32(), VllmRunner(generation_model, dtype="float32") as runner:
        yield runner


class TestHfReference:
    """The reference itself, without vLLM (what a GPU image without vLLM still checks)."""

    def test_beam_width_one_is_greedy(self, hf_outputs):
        greedy = [ids for ids, _ in hf_outputs["greedy"]]
        assert [beam_ids[0] for beam_ids, _ in hf_outputs["beams"][1]] == greedy

    def test_logprobs_follow_the_greedy_tokens(self, hf_outputs):
        """Greedy ids are prompt + output (vLLM's shape); the logprobs cover the output."""
        for (ids, _), (logprob_ids, _, steps) in zip(
            hf_outputs["greedy"], hf_outputs["logprobs"], strict=True
        ):
            assert 0 < len(logprob_ids) < len(ids) and ids[-len(logprob_ids) :] == logprob_ids
            assert [max(step, key=step.get) for step in steps] == logprob_ids


@pytest.mark.vllm
class TestSharedEngine:
    def test_greedy_matches_hf(self, hf_outputs, engine):
        got = engine.generate_greedy(PROMPTS, MAX_TOKENS)
        assert [ids for ids, _ in got] == [ids for ids, _ in hf_outputs["greedy"]]
        assert all(len(ids) > 0 for ids, _ in got)

    def test_logprobs_close_to_hf(self, hf_outputs, engine):
        check_logprobs_close(
            hf_outputs["logprobs"], engine.generate_greedy_logprobs(PROMPTS, MAX_TOKENS, NUM_LOGPROBS)
        )

    @pytest.mark.parametrize("beam_width", BEAM_WIDTHS)
    def test_beam_search_widths(self, hf_outputs, engine, beam_width):
        got = engine.generate_beam_search(PROMPTS, beam_width, MAX_TOKENS)
        for (hf_beams, _), (vllm_beams, _) in zip(hf_outputs["beams"][beam_width], got, strict=True):
            assert len(hf_beams) == len(vllm_beams) == beam_width
            assert hf_beams[0] == vllm_beams[0]

    def test_prompt_perplexity_matches_hf(self, hf_outputs, engine):
        """vLLM's conftest runner's ``generate_prompt_perplexity``, on the harness's runner."""
        got = engine.generate_prompt_perplexity(PROMPTS)
        assert got == pytest.approx(hf_outputs["perplexity"], rel=1e-3)

    def test_collective_rpc_reaches_every_worker(self, engine):
        [inspection] = engine.collective_rpc("get_model_inspection")
        assert "LlamaForCausalLM" in str(inspection) or "Qwen2ForCausalLM" in str(inspection)

    def test_batch_equals_singles(self, engine):
        batch = engine.generate_greedy(PROMPTS, MAX_TOKENS)
        assert batch == [engine.generate_greedy([prompt], MAX_TOKENS)[0] for prompt in PROMPTS]


@pytest.mark.vllm
@pytest.mark.distributed(num_gpus=2)
def test_tensor_parallel_greedy_matches_hf(hf_outputs, generation_model):
    """One engine over two devices (``tensor_parallel_size=2``; the one KV head is replicated), in the
    multi-GPU phase: its greedy ids are HF's."""
    with ieee_float32(), VllmRunner(generation_model, dtype="float32", tensor_parallel_size=2) as engine:
        got = engine.generate_greedy(PROMPTS, MAX_TOKENS)
    assert [ids for ids, _ in got] == [ids for ids, _ in hf_outputs["greedy"]]
