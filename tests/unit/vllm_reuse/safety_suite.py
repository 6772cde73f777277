"""Naive tests of one engine configuration, as a new user writes them: each opens its own runner (shaped like
vLLM's conftest ``VllmRunner``: ``__exit__`` shuts the engine core down), some leave state behind, and the
test after each of those expects what a fresh engine does. Every test but one passes with reuse off; with
reuse on each must still pass without the safety net's retry, and the one test that fails without reuse
(``test_fails_on_its_first_call``) must fail with it.

Run by test_reuse_safety.py (reuse on) and benchmarks/reuse_safety.py (off and on, outcomes compared).
``SAFETY_MODEL`` names a tiny generation model (tests/models/generation/conftest.py builds one).
"""

import os
import signal
import sys
import time
import traceback

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # apply_model sends a function to the workers
MODEL = os.environ["SAFETY_MODEL"]
PROMPT = "a warm engine answers like a new one"
# a GPU sleeps at levels 1 and 2 only in sleep mode; vLLM's CPU backend sleeps without it
SLEEP = {"enable_sleep_mode": True} if os.environ.get("HARNESS_PLATFORM") == "cuda" else {}
FRESH: dict = {}  # what the first engine answered before anything was done to it


class OwnRunner:
    def __init__(self, model_name: str, **kwargs):
        from vllm import LLM

        kwargs = {"dtype": "float32", "max_model_len": 256, "enforce_eager": True, **SLEEP, **kwargs}
        self.llm = LLM(model=model_name, gpu_memory_utilization=0.3, seed=0, **kwargs)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        from vllm.distributed import cleanup_dist_env_and_memory

        self.llm.llm_engine.engine_core.shutdown()
        del self.llm
        cleanup_dist_env_and_memory()


@pytest.fixture
def vllm_runner():
    return OwnRunner


def greedy(runner: OwnRunner) -> list[int]:
    from vllm import SamplingParams

    [output] = runner.llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
    return list(output.outputs[0].token_ids)


def drawn(runner: OwnRunner) -> list[int]:
    """Sampled without a seed of its own: from the workers' random state, seeded by the engine's seed."""
    from vllm import SamplingParams

    [output] = runner.llm.generate([PROMPT], SamplingParams(temperature=1.0, max_tokens=8), use_tqdm=False)
    return list(output.outputs[0].token_ids)


def logprobs(runner: OwnRunner) -> list[float]:
    """The greedy tokens' log-probabilities: float32 results that TF32 matmuls change in the 4th digit."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=8, logprobs=0)
    [output] = runner.llm.generate([PROMPT], params, use_tqdm=False)
    return [next(iter(step.values())).logprob for step in output.outputs[0].logprobs]


def zero_weights(model) -> None:
    """Sent to the workers by apply_model: every logit the same from now on."""
    for parameter in model.parameters():
        parameter.data.zero_()


def test_fresh_answers(vllm_runner):
    with vllm_runner(MODEL) as runner:
        FRESH["drawn"] = drawn(runner)  # first: moves the random state on
        FRESH["greedy"] = greedy(runner)
        FRESH["logprobs"] = logprobs(runner)
        tokenizer = runner.llm.get_tokenizer()
        FRESH["tokenizer"] = (tokenizer.padding_side, getattr(tokenizer, "chat_template", None))
        FRESH["max_tokens"] = runner.llm.get_default_sampling_params().max_tokens


def test_random_state_as_seeded(vllm_runner):
    with vllm_runner(MODEL) as runner:
        assert drawn(runner) == FRESH["drawn"]


def test_tokenizer_left_changed(vllm_runner):
    with vllm_runner(MODEL) as runner:
        tokenizer = runner.llm.get_tokenizer()
        tokenizer.padding_side = "left" if tokenizer.padding_side == "right" else "right"
        tokenizer.chat_template = "{{ messages[0]['content'] }}"


def test_tokenizer_as_loaded(vllm_runner):
    with vllm_runner(MODEL) as runner:
        tokenizer = runner.llm.get_tokenizer()
        assert (tokenizer.padding_side, getattr(tokenizer, "chat_template", None)) == FRESH["tokenizer"]


def test_left_paused(vllm_runner):
    with vllm_runner(MODEL) as runner:
        runner.llm.sleep(level=0)  # scheduling paused; needs no enable_sleep_mode


def test_after_a_paused_engine(vllm_runner):
    with vllm_runner(MODEL) as runner:
        assert greedy(runner) == FRESH["greedy"]  # a paused engine would wait here until the timeout


def test_left_asleep(vllm_runner):
    with vllm_runner(MODEL) as runner:
        runner.llm.sleep(level=1)


def test_after_a_sleeping_engine(vllm_runner):
    with vllm_runner(MODEL) as runner:
        assert greedy(runner) == FRESH["greedy"]


def test_precision_switched(vllm_runner):
    """TF32 for float32 matmuls in this process while its engine starts (an engine process forked from here
    inherits it), put back afterwards: the switch is the test's own, its engine is not the next test's."""
    import torch

    torch.set_float32_matmul_precision("high")
    try:
        with vllm_runner(MODEL) as runner:
            greedy(runner)
    finally:
        torch.set_float32_matmul_precision("highest")


def test_precision_as_default(vllm_runner):
    with vllm_runner(MODEL) as runner:
        assert logprobs(runner) == pytest.approx(FRESH["logprobs"], rel=1e-5)


def test_defaults_left_cached(vllm_runner):
    with vllm_runner(MODEL) as runner:
        runner.llm.default_sampling_params = {"max_tokens": 2}


def test_defaults_as_configured(vllm_runner):
    with vllm_runner(MODEL) as runner:
        assert runner.llm.get_default_sampling_params().max_tokens == FRESH["max_tokens"]


def test_generation_config_left_changed(vllm_runner):
    with vllm_runner(MODEL) as runner:
        runner.llm.llm_engine.model_config.override_generation_config = {"max_new_tokens": 2}


def test_generation_config_as_loaded(vllm_runner):
    with vllm_runner(MODEL) as runner:
        assert runner.llm.llm_engine.model_config.override_generation_config == {}
        assert runner.llm.get_default_sampling_params().max_tokens == FRESH["max_tokens"]


def test_woken_after_a_deep_sleep(vllm_runner):
    with vllm_runner(MODEL) as runner:
        runner.llm.sleep(level=2)  # weights discarded; woken without reloading them
        runner.llm.wake_up()


def test_after_a_deep_sleep(vllm_runner):
    with vllm_runner(MODEL) as runner:
        assert greedy(runner) == FRESH["greedy"]


def test_weights_left_changed(vllm_runner):
    with vllm_runner(MODEL) as runner:
        runner.llm.apply_model(zero_weights)


def test_weights_as_loaded(vllm_runner):
    with vllm_runner(MODEL) as runner:
        assert greedy(runner) == FRESH["greedy"]


def test_engine_core_killed(vllm_runner):
    with vllm_runner(MODEL) as runner:
        [process] = runner.llm.llm_engine.engine_core.resources.engine_manager.processes
        os.kill(process.pid, signal.SIGKILL)
        process.join(30)


def test_after_a_killed_engine(vllm_runner):
    with vllm_runner(MODEL) as runner:
        assert greedy(runner) == FRESH["greedy"]


def test_error_inside_the_with_block(vllm_runner):
    with pytest.raises(ValueError), vllm_runner(MODEL) as runner:
        runner.llm.sleep(level=0)
        raise ValueError("the test's own error, inside its with block")


def test_after_an_error(vllm_runner):
    with vllm_runner(MODEL) as runner:
        assert greedy(runner) == FRESH["greedy"]


def test_before_a_forked_test(vllm_runner):
    with vllm_runner(MODEL) as runner:
        assert greedy(runner) == FRESH["greedy"]


def test_forked(vllm_runner):
    """The shape of vLLM's ``fork_new_process_for_each_test``: the test body runs in a forked child."""
    pid = os.fork()
    if pid == 0:
        try:
            with vllm_runner(MODEL) as runner:
                same = greedy(runner) == FRESH["greedy"]
        except BaseException:
            traceback.print_exc()  # the child's own error, in the test's captured output
            sys.stderr.flush()
            os._exit(1)
        os._exit(0 if same else 1)
    deadline = time.monotonic() + 300
    while (ended := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ended[0] == pid, "the forked test hung"
    assert os.waitstatus_to_exitcode(ended[1]) == 0


def test_after_a_forked_test(vllm_runner):
    with vllm_runner(MODEL) as runner:
        assert greedy(runner) == FRESH["greedy"]


def test_numbers_its_requests_from_zero(vllm_runner):
    """vLLM numbers an LLM's requests from 0: a test that reads the number sees a handed-on engine unless
    the hand-off resets the numbering."""
    from vllm import SamplingParams

    with vllm_runner(MODEL) as runner:
        [output] = runner.llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)
        assert output.request_id == "0"


def finished(runner: OwnRunner) -> float:
    return sum(m.value for m in runner.llm.get_metrics() if m.name == "vllm:request_success")


def test_stats_left_counted(vllm_runner):
    with vllm_runner(MODEL, disable_log_stats=False) as runner:
        greedy(runner)
        assert finished(runner) == 1


def test_stats_from_zero(vllm_runner):
    with vllm_runner(MODEL, disable_log_stats=False) as runner:
        greedy(runner)
        assert finished(runner) == 1


def test_llm_attribute_replaced(vllm_runner):
    with vllm_runner(MODEL) as runner:
        runner.llm.generate = lambda *args, **kwargs: []  # a test's stand-in, left on the instance


def test_after_a_replaced_attribute(vllm_runner):
    with vllm_runner(MODEL) as runner:
        assert greedy(runner) == FRESH["greedy"]


def test_config_edited_in_place(vllm_runner):
    with vllm_runner(MODEL) as runner:
        runner.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs = 1  # a limit read per request


def test_config_as_started(vllm_runner):
    with vllm_runner(MODEL) as runner:
        assert runner.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs != 1


CALLS: list[int] = []


def test_fails_on_its_first_call(vllm_runner):
    """Fails without reuse (the first call in its process), so it must fail with reuse too: the safety net
    runs it again on the engine it failed on, sees it pass there, and keeps the failure."""
    CALLS.append(1)
    with vllm_runner(MODEL) as runner:
        greedy(runner)
    assert len(CALLS) > 1, "the first call in this process"
