"""A child engine and a module-scoped server, and a second server whose share does not fit beside it."""

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest
from shared import MODEL, Server, child_embedding_size


def test_child_engine():
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert pool.submit(child_embedding_size, 0.3).result() == 384


@pytest.fixture(scope="module")
def server():
    running = Server(0.5)
    assert running.process.poll() is None, running.stop()
    yield running
    running.stop()


def test_server_embeds(server):
    assert len(server.embed("a server a fixture started")) == 384


def test_second_server_is_blocked(server):
    second = Server(0.6)
    assert second.process.poll() is not None, "the second server started beside the first"
    assert "cannot start" in second.stop()


def test_an_engine_beside_the_server_is_blocked(server):
    from vllm import LLM

    from harness.errors import RunnerBlocked

    with pytest.raises(RunnerBlocked, match="fixture `server` is module-scoped"):
        LLM(MODEL, runner="pooling", dtype="float32", max_model_len=128, gpu_memory_utilization=0.6)
