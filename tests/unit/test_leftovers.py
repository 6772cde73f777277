"""Which thread a test left can still reach a runner (harness.tracking.leftovers): read from what each thread
holds when asked (its target and arguments, a timer's function, its running frames, a closure, the globals
its code names), never from how long it runs. Each thread here waits on an event, so what it holds is the
same whenever the check runs."""

from __future__ import annotations

import threading

import pytest

from harness.tracking import leftovers


class Engine:
    """A stand-in runner: an object the threads may or may not hold."""


GLOBAL_ENGINE = Engine()


@pytest.fixture
def release():
    """Lets the test's waiting threads go at its end."""
    go = threading.Event()
    started: list[threading.Thread] = []
    yield go, started
    go.set()
    for thread in started:
        if isinstance(thread, threading.Timer):
            thread.cancel()
        thread.join()


def _start(started: list, thread: threading.Thread) -> threading.Thread:
    thread.start()
    started.append(thread)
    return thread


def test_a_thread_whose_closure_holds_the_engine_reaches_it_and_one_that_does_not_does_not(release):
    go, started = release
    engine, other = Engine(), Engine()

    def uses_engine():
        go.wait()
        return engine

    def uses_other():
        go.wait()
        return other

    holder = _start(started, threading.Thread(target=uses_engine, name="holder"))
    bystander = _start(started, threading.Thread(target=uses_other, name="bystander"))
    assert leftovers.reaching([engine], [holder, bystander]) == [holder]
    assert leftovers.reaching([other], [holder, bystander]) == [bystander]


def test_a_timer_reaches_what_its_arguments_hold_until_it_is_cancelled(release):
    _, started = release
    engine = Engine()
    timer = _start(started, threading.Timer(600, print, args=({"engine": [engine]},)))
    assert timer in leftovers.running() and leftovers.reaching([engine], [timer]) == [timer]
    timer.cancel()  # its finished flag is set at once, whether or not its thread has ended yet
    assert timer not in leftovers.running()
    assert leftovers.describe([timer]).endswith("(timer)")


def test_a_thread_reaches_an_engine_through_the_globals_its_code_names_and_its_frames(release):
    go, started = release
    engine = Engine()

    def reads_a_global():
        go.wait()
        return GLOBAL_ENGINE

    def holds_a_local(box):
        mine = box.pop()  # after this, only its running frame holds the engine
        go.wait()
        return mine

    named = _start(started, threading.Thread(target=reads_a_global))
    local = _start(started, threading.Thread(target=holds_a_local, args=([engine],)))
    while local.is_alive() and _frame_waiting(local) is False:
        pass  # until it popped the engine into its frame (no clock: it waits on the event next)
    assert leftovers.reaching([GLOBAL_ENGINE], [named, local]) == [named]
    assert leftovers.reaching([engine], [named, local]) == [local]


def test_a_runners_own_threads_and_the_harnesss_are_not_a_tests(release):
    go, started = release
    runner = _start(started, threading.Thread(target=go.wait, name="vllm-output"))
    harness = _start(started, threading.Thread(target=go.wait, name="harness-sampler"))
    test = _start(started, threading.Thread(target=go.wait, name="the-tests"))
    leftovers.runners_started([runner])
    running = leftovers.running()
    assert test in running and runner not in running and harness not in running
    assert threading.current_thread() not in running


def _frame_waiting(thread: threading.Thread) -> bool:
    """Whether ``thread`` has reached its ``go.wait()`` (its innermost frame is in threading's wait)."""
    import sys

    frame = sys._current_frames().get(thread.ident or -1)
    return frame is not None and frame.f_code.co_name == "wait"
