"""The vLLM adapter: the one package of the harness that knows vLLM's modules and internals
(``tests/unit/test_architecture.py`` and import-linter keep them out of every other module).

Its modules import downwards only, each a role: ``tables`` (what the adapter knows of vLLM, as data),
``llms`` (the one record the adapter keeps per ``vllm.LLM``), ``key`` (what an engine's reuse key holds:
its arguments, the environment that changes an engine, a local model's files), ``health`` (whether a
live engine still serves, its state, its reset and release), ``parking`` (the reuse pool's handle of an
engine, ``Engine``, and why one may not be parked) and ``wrap`` (how ``vllm.LLM`` and ``AsyncLLM`` are
wrapped, ``TARGETS`` for ``tracking.patches``, and the calls the harness's own ``VllmRunner`` makes).

A hand-off never changes an outcome: an engine is parked only when it is alive, idle, awake and reset
within a time limit, and when nothing a reset cannot undo happened to it (watched as it happens: code run
in its workers, a level-2 sleep, a request sampled without its own seed, stats counting); its state at
start (configuration, tokenizer, generation defaults, weight version) is compared before it is handed on.
"""
