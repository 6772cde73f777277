"""The reuse pool's key (harness.tracking.vllm.key): what changes an engine besides its arguments is in it,
so an engine is never handed to a start it would answer differently."""

from __future__ import annotations

import copy
import dataclasses
import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.tracking.vllm import key as starts


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
    for name in (
        "PYTEST_CURRENT_TEST",
        "PYTEST_XDIST_WORKER",
        "HARNESS_TEST_FIXTURE",
    ):  # per test, not engine
        monkeypatch.setenv(name, "test_x.py::test_y (call)")
        assert key("org/model") == plain
        monkeypatch.delenv(name)


def test_a_precision_switch_in_this_process_is_in_the_key():
    """TF32 switched on in the test process reaches an engine process forked from it: another key, and back
    to the default the same key as before."""
    import torch

    plain = key("org/model")
    try:
        torch.set_float32_matmul_precision("high")
        assert key("org/model") != plain
    finally:
        torch.set_float32_matmul_precision("highest")
    assert key("org/model") == plain


def test_every_variable_is_in_the_key_unless_known_not_to_change_an_engine(monkeypatch):
    """A variable outside vLLM's list that the workers read (``ieee_float32()``'s Triton switch) was not in
    the key: a warm engine started under it was handed to a start without it."""
    plain = key("org/model")
    monkeypatch.setenv("TRITON_F32_DEFAULT", "ieee")
    assert key("org/model") != plain
    assert "TRITON_F32_DEFAULT" not in starts.environment()  # in the key by digest, not in the ledger


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


@dataclasses.dataclass
class PoolerConfig:
    """vLLM's ``*Config`` shape: a dataclass built afresh in each call."""

    task: str | None = None
    dimensions: int | None = None
    hook: object = None


def test_config_objects_built_afresh_are_compared_by_value_and_callables_by_identity():
    """``pooler_config=PoolerConfig(...)`` built in each call never matched: 5 starts for 3 configurations."""
    assert key("org/model", hf_overrides=PoolerConfig("embed")) == key(
        "org/model", hf_overrides=PoolerConfig("embed")
    )
    assert key("org/model", hf_overrides=PoolerConfig("embed")) != key(
        "org/model", hf_overrides=PoolerConfig("x")
    )
    assert key("org/model", hf_overrides=PoolerConfig("embed")) != key("org/model")
    hook = print
    assert key("org/model", hf_overrides=PoolerConfig(hook=hook)) == key(
        "org/model", hf_overrides=PoolerConfig(hook=hook)
    )
    assert key("org/model", hf_overrides=PoolerConfig(hook=lambda: 1)) != key(
        "org/model", hf_overrides=PoolerConfig(hook=lambda: 1)
    )  # print alike, two objects
    assert key("org/model", hf_overrides={"a": Path("x")}) == key("org/model", hf_overrides={"a": Path("x")})


def test_pydantic_models_are_compared_by_value():
    pydantic = pytest.importorskip("pydantic")

    class Overrides(pydantic.BaseModel):
        layers: int = 2

    assert key("org/model", hf_overrides=Overrides()) == key("org/model", hf_overrides=Overrides())
    assert key("org/model", hf_overrides=Overrides(layers=3)) != key("org/model", hf_overrides=Overrides())


@settings(max_examples=60, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.floats(allow_nan=False),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(st.text(max_size=3), inner, max_size=3)
            | st.builds(PoolerConfig, st.text(max_size=3) | st.none(), st.integers() | st.none())
        ),
        max_leaves=8,
    )
)
def test_data_built_twice_gives_one_key(value):
    """Any data (plain values, lists, dicts, dataclasses of them), built afresh, is the same key."""
    assert key("org/model", hf_overrides=copy.deepcopy(value)) == key("org/model", hf_overrides=value)


def test_a_local_folder_is_keyed_by_every_file_below_it(tmp_path):
    """A checkpoint folder rewritten in a subfolder, or a small file rewritten with its old time, is
    another model."""
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text('{"layers": 2}')
    weights = model / "sub" / "weights.bin"
    weights.write_bytes(b"1" * 10)
    before = key(str(model))
    weights.write_bytes(b"2" * 11)
    assert key(str(model)) != before
    config = model / "config.json"
    status = config.stat()
    again = key(str(model))
    config.write_text('{"layers": 3}')
    os.utime(config, ns=(status.st_atime_ns, status.st_mtime_ns))  # same size and time, new content
    assert key(str(model)) != again
