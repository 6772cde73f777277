"""The HF adapter: the one package of the harness that imports transformers and sentence-transformers
(import-linter and ``tests/unit/test_architecture.py`` keep them out of every other module), in the shape
of the vLLM adapter (``tracking.vllm``).

Its modules import downwards only, each a role: ``tables`` (what the adapter knows of the two libraries, as
data), ``key`` (a load's configuration and its reuse key), ``health`` (whether a parked model is still
used, or changed since its load: its digest), ``parking`` (the reuse pool's handle of a model, ``Model``,
and the take before a load and the park after it) and ``wrap`` (how ``PreTrainedModel.from_pretrained``
and ``SentenceTransformer`` are wrapped, ``TARGETS`` for ``tracking.patches``, and the loads the harness's
own ``HfRunner`` makes).

HF reuse (opt-in, ``reuse_hf = true``): a model loaded again with the same arguments in the same worker is
handed on instead of loaded again. Nothing announces that its test is done with it, so it is parked at its
load (its policy, ``policies.Open``) and checked at each take: handed on only when nothing but the pool
references it and, its submodules' training mode put back as loaded, its digest is unchanged; a model a
test changed is refused (``reuse-refused``, with the reason) and loaded again. The pool writes the hand-on
(``runner-reused``), as for an engine.
"""
