"""The harness's ``VllmRunner``: one vLLM engine for a ``with`` block, with vLLM's conftest API (see the
package)."""

from __future__ import annotations

import math
from typing import Any

from harness.runners.shared import GPU_MEMORY_UTILIZATION, environment
from harness.tracking.vllm import health, parking, wrap


class VllmRunner:
    """One vLLM engine (``vllm.LLM``) for the life of the ``with`` block; ``.llm`` for everything else.

    ``enforce_eager`` defaults to True: a test suite values start time over throughput, and CUDA graph
    capture or ``torch.compile`` adds seconds to every start. With reuse on (``harness.tracking.reuse``)
    a warm engine of the same configuration is taken instead of starting one, and ``close`` parks it.
    """

    def __init__(
        self,
        model_name: str,
        runner: str = "auto",
        convert: str = "auto",
        tokenizer_name: str | None = None,
        trust_remote_code: bool = True,
        max_model_len: int | None = None,
        dtype: str = "auto",
        enforce_eager: bool = True,
        gpu_memory_utilization: float | None = None,
        **kwargs: Any,
    ) -> None:
        __tracebackhide__ = True
        self.platform, self.settings = environment()
        if gpu_memory_utilization is None:
            gpu_memory_utilization = GPU_MEMORY_UTILIZATION.get(self.platform.name)
        if gpu_memory_utilization is not None:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        self.model = model_name
        kwargs.update(
            runner=runner,
            convert=convert,
            tokenizer=tokenizer_name,
            trust_remote_code=trust_remote_code,
            dtype=dtype,
            enforce_eager=enforce_eager,
        )
        self.llm = wrap.new_llm(model=model_name, **kwargs)  # reuse on: a warm one of this configuration

    def __enter__(self) -> VllmRunner:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Park the engine in the reuse pool when reuse is on and it can be reset, else shut it down and
        give its memory back. On ROCm the shutdown waits ``shutdown_timeout_s`` (60 s) so the engine
        process is not killed while the driver still reclaims VRAM; elsewhere vLLM's default.

        Closing twice is a no-op.
        """
        if self.llm is None:
            return
        parked = parking.close(self.llm, self.settings.shutdown_timeout_s)
        self.llm = None
        if not parked:  # dropped now: its memory goes back
            health.release()

    def get_llm(self):
        return self.llm

    def apply_model(self, func) -> list:
        """``func(model)`` on every worker's model, as ``LLM.apply_model``."""
        return self.llm.apply_model(func)

    def collective_rpc(self, method, *args: Any, **kwargs: Any) -> list:
        """``method`` (a worker method's name, or a function) on every worker, as ``LLM.collective_rpc``."""
        return self.llm.collective_rpc(method, *args, **kwargs)

    def generate_prompt_perplexity(self, prompts: list[str], mask: list[str] | None = None) -> list[float]:
        """Each prompt's perplexity, ``exp`` of minus its tokens' mean log-probability (the first token has
        none); with ``mask``, the tokens of each prompt's masked prefix are left out too."""
        rows = self.generate_greedy_logprobs(prompts, 1, None, num_prompt_logprobs=0)
        tokenizer = self.llm.get_tokenizer()
        skipped = [len(tokenizer(prefix)["input_ids"]) for prefix in mask] if mask else [0] * len(prompts)
        found = []
        for row, skip in zip(rows, skipped, strict=True):
            scored = [next(iter(step.values())).logprob for step in row[-1][1 + skip :]]
            found.append(math.exp(-sum(scored) / len(scored)))
        return found

    @staticmethod
    def get_inputs(prompts: list) -> list[dict]:
        """vLLM prompt dicts: text, token ids, or a prompt dict as given (no multimodal data here)."""
        return [
            dict(p)
            if isinstance(p, dict)
            else {"prompt_token_ids": p}
            if isinstance(p, list)
            else {"prompt": p}
            for p in prompts
        ]

    # --- generation ------------------------------------------------------------------------------------

    def generate(self, prompts: list, sampling_params, return_logprobs: bool = False, **kwargs: Any):
        """Per prompt ``([prompt + output ids per sample], [prompt + output text per sample])``; with
        ``return_logprobs`` also, per prompt, its prompt logprobs then every sample's logprobs."""
        kwargs.setdefault("use_tqdm", False)
        outputs, logprobs = [], []
        for request in self.llm.generate(self.get_inputs(prompts), sampling_params=sampling_params, **kwargs):
            prompt_ids, prompt_text = list(request.prompt_token_ids or []), request.prompt or ""
            ids = [prompt_ids + list(sample.token_ids) for sample in request.outputs]
            outputs.append((ids, [prompt_text + sample.text for sample in request.outputs]))
            samples = [step for sample in request.outputs for step in sample.logprobs or []]
            logprobs.append([*(request.prompt_logprobs or []), *samples])
        return (outputs, logprobs) if return_logprobs else outputs

    def generate_greedy(self, prompts: list, max_tokens: int, **kwargs: Any) -> list[tuple[list[int], str]]:
        """Greedy decoding: per prompt, (prompt + output ids, prompt + output text)."""
        outputs = self.generate(prompts, wrap.sampling(temperature=0.0, max_tokens=max_tokens), **kwargs)
        return [(ids[0], texts[0]) for ids, texts in outputs]

    def generate_w_logprobs(
        self, prompts: list, sampling_params, include_prompt_token_ids: bool = False, **kwargs: Any
    ) -> list[tuple]:
        """Per prompt ``(output ids, output text, logprobs[, prompt ids], prompt logprobs)``; the prompt
        logprobs only when the sampling parameters ask for them (vLLM's shape)."""
        kwargs.setdefault("use_tqdm", False)
        rows: list[tuple] = []
        for request in self.llm.generate(self.get_inputs(prompts), sampling_params=sampling_params, **kwargs):
            sample = request.outputs[-1]
            row: tuple = (list(sample.token_ids), sample.text, sample.logprobs)
            if include_prompt_token_ids:
                row += (request.prompt_token_ids,)
            rows.append(row + (request.prompt_logprobs,))
        return [row[:-1] for row in rows] if sampling_params.prompt_logprobs is None else rows

    def generate_greedy_logprobs(
        self,
        prompts: list,
        max_tokens: int,
        num_logprobs: int | None,
        num_prompt_logprobs: int | None = None,
        stop_token_ids: list[int] | None = None,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> list[tuple]:
        """Greedy decoding with per generated position ``{token id: Logprob}`` of the top tokens."""
        params = wrap.sampling(
            temperature=0.0,
            max_tokens=max_tokens,
            logprobs=num_logprobs,
            prompt_logprobs=num_prompt_logprobs,
            stop_token_ids=stop_token_ids,
            stop=stop,
        )
        return self.generate_w_logprobs(prompts, params, **kwargs)

    def generate_beam_search(
        self, prompts: list, beam_width: int, max_tokens: int, concurrency_limit: int | None = None
    ) -> list[tuple[list[list[int]], list[str]]]:
        """Beam search: per prompt ``([ids per beam], [text per beam])``, best first, prompt included."""
        outputs = self.llm.beam_search(
            self.get_inputs(prompts),
            wrap.beam_search(beam_width=beam_width, max_tokens=max_tokens),
            concurrency_limit=concurrency_limit,
        )
        return [([list(s.tokens) for s in o.sequences], [s.text for s in o.sequences]) for o in outputs]

    # --- pooling ---------------------------------------------------------------------------------------

    def embed(self, prompts: list, *args: Any, **kwargs: Any) -> list[list[float]]:
        """One pooled embedding per prompt (``tokenization_kwargs``, ``pooling_params`` pass through)."""
        kwargs.setdefault("use_tqdm", False)
        return [o.outputs.embedding for o in self.llm.embed(self.get_inputs(prompts), *args, **kwargs)]

    def token_embed(self, prompts: list, **kwargs: Any) -> list:
        """Per prompt a tensor (tokens × hidden); needs an engine whose pooling task is ``token_embed``
        (``pooler_config=PoolerConfig(task="token_embed")`` for an embedding model)."""
        return self._encode(prompts, "token_embed", **kwargs)

    def token_classify(self, prompts: list, **kwargs: Any) -> list:
        """Per prompt a tensor (tokens × classes); vLLM 0.32 reads reward models this way too."""
        return self._encode(prompts, "token_classify", **kwargs)

    def _encode(self, prompts: list, task: str, **kwargs: Any) -> list:
        kwargs.setdefault("use_tqdm", False)
        return [o.outputs.data for o in self.llm.encode(prompts, pooling_task=task, **kwargs)]

    def score(self, text_1, text_2, *args: Any, **kwargs: Any) -> list[float]:
        """vLLM's scoring API, 1:1, 1:N or N:N: cosine (embed), MaxSim (token_embed) or cross-encoder,
        whichever the engine's pooling task selects."""
        kwargs.setdefault("use_tqdm", False)
        return [o.outputs.score for o in self.llm.score(text_1, text_2, *args, **kwargs)]

    def classify(self, prompts: list, **kwargs: Any) -> list[list[float]]:
        """Class probabilities per prompt."""
        kwargs.setdefault("use_tqdm", False)
        return [o.outputs.probs for o in self.llm.classify(prompts, **kwargs)]
