"""``VllmRunner`` and ``HfRunner``: the two model runners a suite compares, as context managers.

The API follows vLLM's own ``tests/conftest.py`` so a vLLM-style suite reads naturally, with two
differences that make comparisons simpler: generated ids are the *new* tokens only (no prompt), and
every method takes a list of prompts and returns one plain Python/NumPy result per prompt.

When the harness plugin is active, ``harness.tracking`` records every ``vllm.LLM`` construction and engine
shutdown and every HF model load, whoever builds them; ``HfRunner`` only widens its load's start to take in
the move to the device. What runners own is a start with known settings and a teardown in the order that
gives memory back (see ``close``).
vllm, torch and transformers are imported inside methods: importing this module costs nothing.
"""

from __future__ import annotations

import gc
from typing import Any

from harness.memory.waits import settle
from harness.platform import allocator
from harness.tracking import vllm_engine
from harness.tracking.context import current
from harness.tracking.starts import fingerprint, normalise, starting

# vLLM's CPU backend reserves ``gpu_memory_utilization`` x NUMA node 0 at start and refuses to start when
# that much is not free: its 0.92 default fails on a 24 GiB host whose node 0 holds 7.6 GiB, 0.3 works
# (measured on a 2-core, 24 GiB machine; docs/measurements.md). GPU platforms keep vLLM's own default.
GPU_MEMORY_UTILIZATION = {"cpu": 0.3}


def _free() -> None:
    """After a runner's references are dropped: collect garbage, then empty the allocator's cache."""
    gc.collect()
    allocator.empty_cache()


class VllmRunner:
    """One vLLM engine (``vllm.LLM``) for the life of the ``with`` block; ``.llm`` for everything else.

    ``enforce_eager`` defaults to True: a test suite values start time over throughput, and CUDA graph
    capture or ``torch.compile`` adds seconds to every start. With reuse on (``harness.tracking.reuse``)
    a warm engine of the same configuration is taken instead of starting one, and ``close`` parks it.
    """

    def __init__(
        self,
        model: str,
        runner: str = "generate",
        dtype: str = "auto",
        max_model_len: int | None = None,
        enforce_eager: bool = True,
        gpu_memory_utilization: float | None = None,
        **engine_kwargs: Any,
    ) -> None:
        from vllm import LLM

        context = current()
        self.platform, self.settings = context.platform, context.settings
        if gpu_memory_utilization is None:
            gpu_memory_utilization = GPU_MEMORY_UTILIZATION.get(self.platform.name)
        if gpu_memory_utilization is not None:
            engine_kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if max_model_len is not None:
            engine_kwargs["max_model_len"] = max_model_len
        self.model = model
        engine_kwargs.update(runner=runner, dtype=dtype, enforce_eager=enforce_eager)
        # the ledger's fingerprint of this call (the instrumented LLM.__init__ keeps LLM's signature)
        self.key = fingerprint("vllm", normalise(LLM.__init__, (None, model), engine_kwargs))
        pool = context.pool
        self.fresh = pool is not None and pool.fresh
        warm = pool.take(self.key) if pool is not None else None
        self.llm = warm if warm is not None else LLM(model, **engine_kwargs)

    def __enter__(self) -> VllmRunner:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Park the engine in the reuse pool when reuse is on and it can be reset, else shut it down.

        Closing twice is a no-op.
        """
        if self.llm is None:
            return
        pool = current().pool
        parked = pool is not None and pool.park(
            self.key,
            self.llm,
            fresh=self.fresh,
            reset=vllm_engine.reset,
            state=vllm_engine.state,
            shutdown=self._stop,
            release=self._release,
        )
        if not parked:
            self._stop(self.llm)
        self.llm = None
        if not parked:
            self._release()

    def _stop(self, llm) -> None:
        """Shut the engine down. On ROCm this waits ``shutdown_timeout_s`` (60 s) so the engine process is
        not killed while the driver still reclaims VRAM; elsewhere vLLM's default."""
        llm.llm_engine.engine_core.shutdown(timeout=self.settings.shutdown_timeout_s)

    def _release(self) -> None:
        """Once the engine is dropped: collect, empty caches, clean vLLM's distributed state, settle."""
        from vllm.distributed import cleanup_dist_env_and_memory

        _free()
        cleanup_dist_env_and_memory()
        settle(self.platform, self.settings)

    # --- generation ------------------------------------------------------------------------------------

    def generate_greedy(self, prompts: list, max_tokens: int) -> list[tuple[list[int], str]]:
        """Greedy decoding: per prompt, the new token ids and their text."""
        from vllm import SamplingParams

        outputs = self.llm.generate(
            prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens), use_tqdm=False
        )
        return [(list(o.outputs[0].token_ids), o.outputs[0].text) for o in outputs]

    def generate_greedy_logprobs(
        self, prompts: list, max_tokens: int, num_logprobs: int
    ) -> list[tuple[list[int], str, list[dict[int, float]]]]:
        """Greedy decoding with, per generated position, ``{token id: logprob}`` of the top tokens."""
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=num_logprobs)
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [
            (
                list(o.outputs[0].token_ids),
                o.outputs[0].text,
                [{t: lp.logprob for t, lp in step.items()} for step in o.outputs[0].logprobs],
            )
            for o in outputs
        ]

    def generate_beam_search(
        self, prompts: list[str], beam_width: int, max_tokens: int
    ) -> list[list[tuple[list[int], str]]]:
        """Beam search: per prompt, ``beam_width`` beams best first, each (new token ids, text)."""
        from vllm.sampling_params import BeamSearchParams

        tokenizer = self.llm.get_tokenizer()
        outputs = self.llm.beam_search(
            [{"prompt": p} for p in prompts], BeamSearchParams(beam_width=beam_width, max_tokens=max_tokens)
        )
        beams = []
        for prompt, output in zip(prompts, outputs, strict=True):
            start = len(tokenizer(prompt)["input_ids"])
            new = [list(s.tokens[start:]) for s in output.sequences]
            beams.append([(ids, tokenizer.decode(ids, skip_special_tokens=True)) for ids in new])
        return beams

    # --- pooling ---------------------------------------------------------------------------------------

    def embed(self, prompts: list, **kwargs: Any) -> list[list[float]]:
        """One pooled embedding per prompt (``tokenization_kwargs``, ``pooling_params`` pass through)."""
        return [o.outputs.embedding for o in self.llm.embed(prompts, use_tqdm=False, **kwargs)]

    def token_embed(self, prompts: list, **kwargs: Any) -> list:
        """Per prompt a float32 NumPy array (tokens × hidden); needs an engine whose pooling task is
        ``token_embed`` (``pooler_config=PoolerConfig(task="token_embed")`` for an embedding model)."""
        outputs = self.llm.encode(prompts, pooling_task="token_embed", use_tqdm=False, **kwargs)
        return [o.outputs.data.float().cpu().numpy() for o in outputs]

    def score(self, queries, documents, **kwargs: Any) -> list[float]:
        """vLLM's scoring API, 1:1, 1:N or N:N: cosine (embed), MaxSim (token_embed) or cross-encoder,
        whichever the engine's pooling task selects."""
        return [o.outputs.score for o in self.llm.score(queries, documents, use_tqdm=False, **kwargs)]

    def classify(self, prompts: list, **kwargs: Any) -> list[list[float]]:
        """Class probabilities per prompt."""
        return [o.outputs.probs for o in self.llm.classify(prompts, use_tqdm=False, **kwargs)]


class HfRunner:
    """One HF model (transformers ``auto_cls`` or a ``SentenceTransformer``) on the platform's device.

    ``auto_cls`` defaults to ``AutoModelForCausalLM``; ``dtype`` is a name (``"float32"``) or ``"auto"``.
    """

    def __init__(
        self,
        model: str,
        dtype: str = "auto",
        auto_cls: Any = None,
        is_sentence_transformer: bool = False,
        **model_kwargs: Any,
    ) -> None:
        import torch

        context = current()
        self.platform, self.settings = context.platform, context.settings
        self.device = "cuda" if self.platform.name in ("cuda", "rocm") else "cpu"
        self.name = model
        torch_dtype = dtype if dtype == "auto" else getattr(torch, dtype)
        self.is_sentence_transformer = is_sentence_transformer
        if is_sentence_transformer:
            from sentence_transformers import SentenceTransformer

            self.model = SentenceTransformer(
                model, device=self.device, model_kwargs={"dtype": torch_dtype, **model_kwargs}
            )
            self.tokenizer = self.model.tokenizer
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            self.model = _load_on(
                self.device, auto_cls or AutoModelForCausalLM, model, dtype=torch_dtype, **model_kwargs
            )
            self.model.eval()
            self.tokenizer = AutoTokenizer.from_pretrained(model)

    def __enter__(self) -> HfRunner:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Drop the model, collect (the ledger records the stop here), empty caches, settle (ROCm)."""
        if self.model is None:
            return
        self.model = self.tokenizer = None
        _free()
        settle(self.platform, self.settings)

    # --- pooling ---------------------------------------------------------------------------------------

    def encode(self, prompts: list[str], **kwargs: Any) -> list[list[float]]:
        """Sentence embeddings as the SentenceTransformer's own modules pool and normalise them."""
        if not self.is_sentence_transformer:
            raise ValueError(f"HfRunner({self.name!r}).encode needs is_sentence_transformer=True")
        return self.model.encode(prompts, convert_to_numpy=True, **kwargs).tolist()

    embed = encode

    def token_embed(self, prompts: list[str]) -> list:
        """Per prompt a float32 NumPy array (tokens × hidden): the transformer's last hidden states."""
        import torch

        if self.is_sentence_transformer:
            outputs = self.model.encode(prompts, output_value="token_embeddings")
            return [o.float().cpu().numpy() for o in outputs]
        arrays = []
        with torch.no_grad():
            for prompt in prompts:
                inputs = self.tokenizer(prompt, return_tensors="pt").to(self.device)
                hidden = self.model(**inputs).last_hidden_state[0]
                arrays.append(hidden.float().cpu().numpy())
        return arrays

    # --- generation ------------------------------------------------------------------------------------

    def _generate(self, prompt: str, max_tokens: int, **kwargs: Any):
        import torch

        # Causal LMs take no token_type_ids (a BERT-style tokenizer returns them unasked).
        inputs = self.tokenizer(prompt, return_tensors="pt", return_token_type_ids=False).to(self.device)
        with torch.no_grad():
            out = self.model.generate(**inputs, max_new_tokens=max_tokens, do_sample=False, **kwargs)
        return inputs["input_ids"].shape[1], out

    def _text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def generate_greedy(self, prompts: list[str], max_tokens: int) -> list[tuple[list[int], str]]:
        """Greedy decoding, one prompt at a time (no padding to disturb the comparison)."""
        results = []
        for prompt in prompts:
            start, out = self._generate(prompt, max_tokens)
            ids = out[0, start:].tolist()
            results.append((ids, self._text(ids)))
        return results

    def generate_greedy_logprobs(
        self, prompts: list[str], max_tokens: int, num_logprobs: int
    ) -> list[tuple[list[int], str, list[dict[int, float]]]]:
        """Greedy decoding with the top ``num_logprobs`` log-probabilities of the raw logits per step."""
        import torch

        results = []
        for prompt in prompts:
            start, out = self._generate(prompt, max_tokens, output_logits=True, return_dict_in_generate=True)
            ids = out.sequences[0, start:].tolist()
            steps = []
            for logits in out.logits:
                top = torch.log_softmax(logits[0].float(), dim=-1).topk(num_logprobs)
                steps.append(dict(zip(top.indices.tolist(), top.values.tolist(), strict=True)))
            results.append((ids, self._text(ids), steps))
        return results

    def generate_beam_search(
        self, prompts: list[str], beam_width: int, max_tokens: int
    ) -> list[list[tuple[list[int], str]]]:
        """Beam search: per prompt, ``beam_width`` beams best first, each (new token ids, text)."""
        results = []
        for prompt in prompts:
            start, out = self._generate(
                prompt, max_tokens, num_beams=beam_width, num_return_sequences=beam_width
            )
            beams = [row[start:].tolist() for row in out]
            pad = self.tokenizer.pad_token_id
            beams = [ids[: len(ids) - _trailing(ids, pad)] for ids in beams]
            results.append([(ids, self._text(ids)) for ids in beams])
        return results


def _load_on(device: str, auto_cls: Any, model: str, **kwargs: Any) -> Any:
    """``from_pretrained`` and the move to ``device`` as one recorded start, so the weights and, on a GPU,
    this process's CUDA context appear inside it (``device_map`` would do it in one call, but needs
    accelerate). The ``from_pretrained`` inside is the same start, not another."""
    config = normalise(auto_cls.from_pretrained, (model,), kwargs)
    config["class"] = auto_cls.__name__
    with starting("hf", model, config) as run:
        loaded = auto_cls.from_pretrained(model, **kwargs).to(device)
    if run is not None:
        run.watch(loaded)
    return loaded


def _trailing(ids: list[int], pad: int | None) -> int:
    """How many pad ids end ``ids`` (HF pads shorter beams to the longest one)."""
    count = 0
    while pad is not None and count < len(ids) and ids[-1 - count] == pad:
        count += 1
    return count
