"""What the adapter knows of vLLM, as data: its defaults, the modules and classes it wraps, the variables
that change an engine, what a reset puts back itself and what a test may change in a tokenizer."""

from __future__ import annotations

VLLM_DEFAULT_UTILIZATION = 0.92  # vllm.LLM's default, used when the signature cannot be read

# the classes ``tracking.patches`` wraps where vLLM defines them: (module, class, method); ``wrap.TARGETS``
# pairs each with its wrapper
WRAPPED = (
    ("vllm.entrypoints.llm", "LLM", "__init__"),
    ("vllm.v1.engine.async_llm", "AsyncLLM", "__init__"),
)

# what changes an engine besides its arguments and vLLM's own list (``vllm.envs.environment_variables``):
# device masks (``platform.masks.VARIABLES``), and the libraries vLLM builds on
PREFIXES = ("VLLM_", "HF_", "PYTORCH_", "NCCL_")


# variables that change no engine and differ between tests of one session: pytest's and xdist's own, the
# harness's per-test ones, the shell's
NOT_ENGINE = frozenset(("PYTEST_CURRENT_TEST", "_", "PWD", "OLDPWD", "SHLVL", "COLUMNS", "LINES"))


NOT_ENGINE_PREFIXES = ("PYTEST_XDIST_", "HARNESS_")

RESET_ATTRIBUTES = ("default_sampling_params",)  # what ``_reset`` puts back itself


TOKENIZER_FIELDS = ("padding_side", "truncation_side", "model_max_length", "chat_template", "add_bos_token")

PLAIN_SCALARS = (str, int, float, bool, type(None))  # data compared by value wherever it sits
