"""The harness's ``HfRunner``: one HF model on the platform's device, with vLLM's conftest API (see the
package)."""

from __future__ import annotations

from typing import Any

from harness.memory.waits import settle
from harness.runners.shared import environment, free
from harness.tracking.hf import wrap


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

        self.platform, self.settings = environment()
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
            self.model = wrap.sentence_model(model_name, not is_sentence_transformer, **options)
            self.tokenizer = self.model.tokenizer
            return
        model = wrap.load(
            self.device,
            auto_cls,
            model_name,
            revision=revision,
            trust_remote_code=trust_remote_code,
            **model_kwargs,
        )
        self.model = model.eval()
        if not skip_tokenizer_init:
            self.tokenizer = wrap.tokenizer(tokenizer_name or model_name, trust_remote_code)

    def __enter__(self) -> HfRunner:
        return self

    @property
    def processor(self) -> Any:
        """The processor given, else ``AutoProcessor``'s for the model, loaded on first use (a text model's
        is its tokenizer); vLLM's runner loads it in ``__init__``, which costs every test that never asks."""
        if self._processor is None:
            self._processor = wrap.processor(self.model_name, self.trust_remote_code)
        return self._processor

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Drop the model, collect (the ledger records the stop here), empty caches, settle (ROCm)."""
        if self.model is None:
            return
        self.model = self.tokenizer = None
        free()
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
