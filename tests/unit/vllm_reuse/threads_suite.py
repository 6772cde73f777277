"""Tests that leave a thread or a timer behind (issue 58, the reuse residue), shaped like vLLM's conftest
runner. ``test_leaves_a_thread`` leaves a thread that sends one request to its engine once ``GO`` is set,
and a timer that would send one in ten minutes; ``test_numbers_from_zero`` sets ``GO`` first, waits for
the thread, and expects vLLM's first request number. Without reuse the thread's engine is shut down (its
request fails in the thread) and every test passes; with reuse the engine those threads reach must not be
handed on. Nothing here waits on a clock: the thread sends its request when ``GO`` is set, not after a
delay. ``test_joins_its_thread`` ends its thread before its close: its engine is kept warm as ever.

Run by test_reuse_safety.py, beside safety_suite.py (its runner). ``SAFETY_MODEL`` names a tiny generation
model.
"""

import os
import threading

import pytest
import safety_suite

MODEL = os.environ["SAFETY_MODEL"]
GO, DONE = threading.Event(), threading.Event()
LEFT: list[threading.Timer] = []


@pytest.fixture
def vllm_runner():
    return safety_suite.OwnRunner  # vLLM conftest's runner shape


def one(llm, tokens: int = 2):
    from vllm import SamplingParams

    [output] = llm.generate(["left behind"], SamplingParams(temperature=0, max_tokens=tokens), use_tqdm=False)
    return output


def test_leaves_a_thread(vllm_runner):
    with vllm_runner(MODEL) as runner:
        llm = runner.llm
        one(llm)

    def later():
        GO.wait()
        try:
            one(llm)  # a shut-down engine raises here, in the thread: not the test's concern
        except Exception:
            pass
        finally:
            DONE.set()

    threading.Thread(target=later, name="left-behind").start()
    timer = threading.Timer(600, one, args=(llm,))
    timer.start()
    LEFT.append(timer)


def test_numbers_from_zero(vllm_runner):
    with vllm_runner(MODEL) as runner:
        GO.set()
        assert DONE.wait(300)
        for timer in LEFT:
            timer.cancel()
        assert one(runner.llm).request_id == "0"


def test_joins_its_thread(vllm_runner):
    with vllm_runner(MODEL) as runner:
        worker = threading.Thread(target=one, args=(runner.llm,))
        worker.start()
        worker.join()


def test_after_a_joined_thread(vllm_runner):
    with vllm_runner(MODEL) as runner:
        assert one(runner.llm).request_id == "0"
