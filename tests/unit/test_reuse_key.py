"""The reuse pool's key (harness.tracking.vllm_engine): what changes an engine besides its arguments is in it,
so an engine is never handed to a start it would answer differently."""

from __future__ import annotations

import os
import time

from harness.tracking import vllm_engine as starts


def llm(model, *, tokenizer=None, hf_overrides=None, **kwargs):
    """vllm.LLM's shape, as far as the key reads it."""


def key(*args, **kwargs) -> str:
    config, _, _ = starts.vllm_configuration(llm, args, kwargs)
    return starts.reuse_key(config, args, kwargs)


def test_device_masks_and_the_libraries_variables_are_in_the_key(monkeypatch):
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "HF_HUB_OFFLINE", "PYTORCH_ALLOC_CONF"):
        monkeypatch.delenv(name, raising=False)
    plain = key("org/model")
    for name, value in (("CUDA_VISIBLE_DEVICES", "1"), ("HF_HUB_OFFLINE", "1"), ("PYTORCH_ALLOC_CONF", "x")):
        monkeypatch.setenv(name, value)
        assert name in starts.environment()
        assert key("org/model") != plain
        monkeypatch.delenv(name)
    monkeypatch.setenv("UNRELATED_TO_VLLM", "1")
    assert key("org/model") == plain


def test_the_variables_vllm_lists_are_in_the_key(monkeypatch):
    import types

    listed = types.SimpleNamespace(environment_variables={"S3_ENDPOINT_URL": lambda: None})
    monkeypatch.setitem(__import__("sys").modules, "vllm.envs", listed)
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)
    plain = key("org/model")
    monkeypatch.setenv("S3_ENDPOINT_URL", "http://elsewhere")
    assert key("org/model") != plain


def test_a_relative_model_path_is_resolved_and_its_files_are_in_the_key(tmp_path, monkeypatch):
    for place in ("a", "b"):
        (tmp_path / place / "model").mkdir(parents=True)
        (tmp_path / place / "model" / "config.json").write_text('{"layers": 2}')
    monkeypatch.chdir(tmp_path / "a")
    in_a = key("model")
    monkeypatch.chdir(tmp_path / "b")
    assert key("model") != in_a  # the same text, another model
    before = key("model")
    config = tmp_path / "b" / "model" / "config.json"
    config.write_text('{"layers": 3}')
    os.utime(config, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert key("model") != before  # files changed in place
    assert key("model") == key("model")


def test_callables_are_the_same_only_when_they_are_one_object():
    def make():
        return lambda config: config

    first, second = make(), make()
    assert str(first).split(" at ")[0] == str(second).split(" at ")[0]  # they print alike
    assert key("org/model", hf_overrides=first) == key("org/model", hf_overrides=first)
    assert key("org/model", hf_overrides=first) != key("org/model", hf_overrides=second)
    assert key("org/model") == key("org/model")
