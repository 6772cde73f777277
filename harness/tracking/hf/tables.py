"""What the HF adapter knows of transformers and sentence-transformers, as data: the classes it wraps, the
argument that names a load's model, and what of a loaded model its digest reads besides its tensors."""

from __future__ import annotations

# the classes ``tracking.patches`` wraps where the libraries define them: (module, class, method);
# ``wrap.TARGETS`` pairs each with its wrapper
WRAPPED = (
    ("transformers.modeling_utils", "PreTrainedModel", "from_pretrained"),
    ("sentence_transformers", "SentenceTransformer", "__init__"),
)

PRETRAINED = "pretrained_model_name_or_path"  # the model a ``from_pretrained`` loads (a local folder: keyed)
SENTENCE_MODEL = "model_name_or_path"  # the model a ``SentenceTransformer`` loads

# a submodule's hook tables (``_backward_pre_hooks`` is missing in older torch): a hook added is a change
HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")

CONFIGS = ("config", "generation_config")  # read as JSON: one edited in place changes generate()
