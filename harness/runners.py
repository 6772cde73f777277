"""``VllmRunner`` and ``HfRunner``: the two model runners a suite compares, as context managers.

Their API is vLLM 0.32's ``tests/conftest.py`` for text models (names, arguments, return shapes), so a test
written against vLLM's conftest runs against the harness's ``vllm_runner`` / ``hf_runner`` unchanged:
``generate`` and ``generate_greedy`` give prompt + output as vLLM does, ``generate_greedy_logprobs`` vLLM's
``Logprob`` dicts, ``HfRunner.generate_greedy_logprobs_limit`` the HF side of that comparison.
Differences kept on purpose (README, "Adopting the harness in a vLLM-style tree"): ``enforce_eager`` is True,
the CPU's ``gpu_memory_utilization`` is 0.3, ``max_model_len`` is the model's, vLLM's other engine defaults
stand; no multimodal inputs; HF logprobs come from the logits ``generate`` returns; ``embed`` and
``token_embed`` on ``HfRunner`` are the harness's own.

When the harness plugin is active, ``harness.tracking`` records every ``vllm.LLM`` construction and engine
shutdown and every HF model load, whoever builds them; ``HfRunner`` only widens its load's start to take in
the move to the device. What runners own is a start with known settings and a teardown in the order that
gives memory back (see ``close``).
vllm, torch and transformers are imported inside methods: importing this module costs nothing.
"""

from __future__ import annotations

import gc
import math
from typing import Any

from harness.memory.waits import settle
from harness.platform import allocator
from harness.tracking import hf_reuse, patches, reuse, starts, vllm_engine
from harness.tracking.context import current
from harness.tracking.starts import normalise, starting

# vLLM's CPU backend reserves ``gpu_memory_utilization`` x NUMA node 0 at start and refuses to start when
# that much is not free: its 0.92 default fails on a host whose node 0 holds a small part of its memory,
# 0.3 works (docs/adoption.md). GPU platforms keep vLLM's own default.
GPU_MEMORY_UTILIZATION = {"cpu": 0.3}


def _free() -> None:
    """After a runner's references are dropped: collect garbage, then empty the allocator's cache."""
    gc.collect()
    allocator.empty_cache()


def _environment():
    """This process's platform and settings; a test's spawned process (no plugin there) records its runners
    into the test's ledger from here on."""
    context = current()
    if starts.adopt(context) is not None:
        patches.install()
    return context.platform, context.settings


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
        self.platform, self.settings = _environment()
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
        self.llm = vllm_engine.new_llm(
            model=model_name, **kwargs
        )  # reuse on: a warm one of this configuration

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
        parked = vllm_engine.close(self.llm, self.settings.shutdown_timeout_s)
        self.llm = None
        if not parked:
            vllm_engine.release()

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
        outputs = self.generate(
            prompts, vllm_engine.sampling(temperature=0.0, max_tokens=max_tokens), **kwargs
        )
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
        params = vllm_engine.sampling(
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
            vllm_engine.beam_search(beam_width=beam_width, max_tokens=max_tokens),
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


class HfRunner:
    """One HF model (transformers ``auto_cls``, a ``SentenceTransformer`` or a ``CrossEncoder``) on the
    platform's device. ``dtype`` is a torch dtype name (``"float32"``, ``"half"``) or ``"auto"``;
    ``revision`` pins the model's (a hub branch, tag or commit), and ``processor`` is the one given or,
    on first use, ``AutoProcessor``'s, as vLLM's ``HfRunner`` has them."""

    def __init__(
        self,
        model_name: str,
        dtype: str = "auto",
        *,
        revision: str | None = None,
        model_kwargs: dict[str, Any] | None = None,
        trust_remote_code: bool = True,
        is_sentence_transformer: bool = False,
        is_cross_encoder: bool = False,
        skip_tokenizer_init: bool = False,
        auto_cls: Any = None,
        tokenizer_name: str | None = None,
        processor: Any | None = None,
    ) -> None:
        __tracebackhide__ = True
        import torch

        self.platform, self.settings = _environment()
        self.device = self.platform.torch_device
        self.model_name = self.name = model_name
        model_kwargs = {"dtype": dtype if dtype == "auto" else getattr(torch, dtype), **(model_kwargs or {})}
        self.is_sentence_transformer = is_sentence_transformer
        self.trust_remote_code, self._processor = trust_remote_code, processor
        options = {
            "device": self.device,
            "revision": revision,
            "trust_remote_code": trust_remote_code,
            "model_kwargs": model_kwargs,
        }
        self.tokenizer: Any = None
        if is_sentence_transformer or is_cross_encoder:
            from sentence_transformers import CrossEncoder, SentenceTransformer

            self.model = (SentenceTransformer if is_sentence_transformer else CrossEncoder)(
                model_name, **options
            )
            self.tokenizer = self.model.tokenizer
            return
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = _load_on(
            self.device,
            auto_cls or AutoModelForCausalLM,
            model_name,
            revision=revision,
            trust_remote_code=trust_remote_code,
            **model_kwargs,
        )
        self.model = model.eval()
        if not skip_tokenizer_init:
            self.tokenizer = AutoTokenizer.from_pretrained(
                tokenizer_name or model_name, trust_remote_code=trust_remote_code
            )

    def __enter__(self) -> HfRunner:
        return self

    @property
    def processor(self) -> Any:
        """The processor given, else ``AutoProcessor``'s for the model, loaded on first use (a text model's
        is its tokenizer); vLLM's runner loads it in ``__init__``, which costs every test that never asks."""
        if self._processor is None:
            from transformers import AutoProcessor

            self._processor = AutoProcessor.from_pretrained(
                self.model_name, trust_remote_code=self.trust_remote_code
            )
        return self._processor

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

    def encode(self, prompts: list[str], *args: Any, **kwargs: Any):
        """Sentence embeddings as the SentenceTransformer's own modules pool and normalise them."""
        if not self.is_sentence_transformer:
            raise ValueError(f"HfRunner({self.name!r}).encode needs is_sentence_transformer=True")
        return self.model.encode(prompts, *args, **kwargs)

    embed = encode

    def predict(self, prompts: list[list[str]], *args: Any, **kwargs: Any):
        """A cross-encoder's scores of ``[query, document]`` pairs, as one tensor."""
        return self.model.predict(prompts, *args, convert_to_tensor=True, **kwargs)

    def classify(self, prompts: list[str]) -> list[list[float]]:
        """Per prompt the class probabilities (softmax; sigmoid for multi-label, raw for regression)."""
        import torch

        problem = getattr(self.model.config, "problem_type", "")
        outputs = []
        with torch.no_grad():
            for prompt in prompts:
                logits = self.model(**self._inputs(prompt)).logits[0]
                if problem == "multi_label_classification":
                    logits = logits.sigmoid()
                elif problem != "regression":
                    logits = logits.softmax(dim=-1)
                outputs.append(logits.tolist())
        return outputs

    def token_embed(self, prompts: list[str]) -> list:
        """Per prompt a float32 NumPy array (tokens × hidden): the transformer's last hidden states."""
        import torch

        if self.is_sentence_transformer:
            outputs = self.model.encode(prompts, output_value="token_embeddings")
            return [o.float().cpu().numpy() for o in outputs]
        arrays = []
        with torch.no_grad():
            for prompt in prompts:
                hidden = self.model(**self._inputs(prompt)).last_hidden_state[0]
                arrays.append(hidden.float().cpu().numpy())
        return arrays

    # --- generation ------------------------------------------------------------------------------------

    def _inputs(self, prompt: str, **kwargs: Any):
        return self.tokenizer(prompt, return_tensors="pt", **kwargs).to(self.device)

    def generate(self, prompts: list[str], **kwargs: Any) -> list[tuple[list[list[int]], list[str]]]:
        """``model.generate`` one prompt at a time (no padding to disturb a comparison): per prompt
        ``([prompt + output ids per sequence], [their text])``, as vLLM's ``HfRunner.generate``."""
        import torch

        outputs = []
        for prompt in prompts:
            # causal LMs take no token_type_ids (a BERT-style tokenizer returns them unasked)
            with torch.no_grad():
                ids = self.model.generate(**self._inputs(prompt, return_token_type_ids=False), **kwargs)
            texts = self.tokenizer.batch_decode(
                ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
            )
            outputs.append((ids.cpu().tolist(), texts))
        return outputs

    def generate_greedy(
        self, prompts: list[str], max_tokens: int, **kwargs: Any
    ) -> list[tuple[list[int], str]]:
        """Greedy decoding: per prompt, (prompt + output ids, their text)."""
        outputs = self.generate(prompts, do_sample=False, max_new_tokens=max_tokens, **kwargs)
        return [(ids[0], texts[0]) for ids, texts in outputs]

    def generate_greedy_logprobs_limit(
        self, prompts: list[str], max_tokens: int, num_logprobs: int, **kwargs: Any
    ) -> list[tuple[list[int], str, list[dict[int, float]]]]:
        """Greedy decoding with the top ``num_logprobs`` log-probabilities per generated position: per
        prompt (output ids, output text, ``[{token id: logprob}]``), what vLLM's ``check_logprobs_close``
        compares with ``VllmRunner.generate_greedy_logprobs``."""
        import torch

        results = []
        for prompt in prompts:
            inputs = self._inputs(prompt, return_token_type_ids=False)
            with torch.no_grad():
                out = self.model.generate(
                    **inputs,
                    do_sample=False,
                    max_new_tokens=max_tokens,
                    output_logits=True,
                    return_dict_in_generate=True,
                    **kwargs,
                )
            ids = out.sequences[0, inputs["input_ids"].shape[1] :].tolist()
            steps = []
            for logits in out.logits:
                top = torch.log_softmax(logits[0].float(), dim=-1).topk(num_logprobs)
                steps.append(dict(zip(top.indices.tolist(), top.values.tolist(), strict=True)))
            results.append((ids, self.tokenizer.decode(ids), steps))
        return results

    def generate_beam_search(
        self, prompts: list[str], beam_width: int, max_tokens: int
    ) -> list[tuple[list[list[int]], list[str]]]:
        """Beam search: per prompt ``([ids per beam], [text per beam])``, best first, prompt included;
        the pad ids HF fills shorter beams with are dropped."""
        outputs = self.generate(
            prompts,
            do_sample=False,
            max_new_tokens=max_tokens,
            num_beams=beam_width,
            num_return_sequences=beam_width,
        )
        pad = self.tokenizer.pad_token_id
        return [([[t for t in beam if t != pad] for beam in ids], texts) for ids, texts in outputs]


def _load_on(device: str, auto_cls: Any, model: str, **kwargs: Any) -> Any:
    """``from_pretrained`` and the move to ``device`` as one recorded start, so the weights and, on a GPU,
    this process's CUDA context appear inside it (``device_map`` would do it in one call, but needs
    accelerate). The ``from_pretrained`` inside is the same start, not another; with HF reuse on, a kept
    model of the same load is handed on instead."""
    config = normalise(auto_cls.from_pretrained, (model,), kwargs)
    config["class"], config["device"] = auto_cls.__name__, device
    if (files := starts.local_files(model)) is not None:
        config["model_files"] = files
    pool = reuse.pool("hf")  # HF reuse: the load inside is nested in this start, so it is decided here
    key = starts.fingerprint("hf", config)
    if pool is not None and (kept := pool.take(key)) is not None:
        return kept
    with starting("hf", model, config) as run:
        loaded = auto_cls.from_pretrained(model, **kwargs).to(device)
    if run is not None:
        run.watch(loaded)
        if pool is not None:
            pool.park(hf_reuse.Model.loaded(key, loaded, run))
    return loaded
