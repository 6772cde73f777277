"""The reuse pool (harness.tracking.reuse) over stand-in engines: what is kept, handed on, refused, shut down.

The engines are plain objects parked through the pool's one protocol (``Handle``: the pool never looks
inside one; ``Stand`` answers with the adapter's own refusal order and comparisons over a stand-in reset
and state); the real vLLM path is in test_reuse_vllm.py. ``alive`` tracks which engines are not shut down,
so "never two engines side by side" is checked on every start.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from harness import ledger
from harness.config.settings import load_settings
from harness.ledger.writer import LedgerWriter
from harness.platform.host import HostPlatform
from harness.tracking import context
from harness.tracking.handles import FRESH, Terms
from harness.tracking.reuse import Pool, running
from harness.tracking.vllm import key as keys
from harness.tracking.vllm import parking
from harness.tracking.vllm.llms import Started


class Engine:
    def __init__(self, key: str, alive: set):
        self.key, self.alive, self.config, self.dirty = key, alive, {"max_model_len": 128}, False
        alive.add(self)


def state(engine: Engine) -> str:
    return str(engine.config)


def reset(engine: Engine) -> str | None:
    if engine.dirty == "stuck":
        return "it was left asleep and did not wake up fully"
    engine.dirty = False
    return None


@dataclass(eq=False)
class Stand:
    """A stand-in engine's handle: what ``vllm.parking.Engine`` does, over the stand-in's reset and state."""

    runner: Engine | None
    began: Started | None
    shutdown: Callable[[Engine], None]
    dead: Callable[[], str | None] = lambda: None
    kind = "vllm"

    @property
    def key(self) -> str:
        return self.began.key if self.began is not None else ""

    @property
    def run(self):
        return self.began.run if self.began is not None else None

    @property
    def share(self) -> float | None:
        return self.run.need.fraction if self.run is not None else None

    def parts(self) -> tuple[object, ...]:
        return (self.runner,)

    def refusal(self) -> str | None:
        engine = self.runner
        return parking.parking_refusal(self.began, None, lambda: reset(engine), lambda: state(engine))

    def differs(self, wanted: object) -> str | None:
        return keys.differs(self.began, wanted)

    def alive(self) -> str | None:
        return self.dead()

    def stop(self) -> None:
        self.shutdown(self.runner)
        self.runner = None


def track(pool, engine, run, key="", base=None, environment=None, objects=None) -> None:
    """What the instrumented ``vllm.LLM`` notes of a start (``vllm.llms.Tracked.began``)."""
    fresh = running().mode == FRESH
    began[engine] = Started(run, state(engine), key, base, environment or {}, fresh, objects or {})


def want(key: str, base: str | None = None, environment=None, objects=None) -> Started:
    """A start's record, as the instrumented ``vllm.LLM`` hands it to ``take``."""
    return Started(None, "", key, base, environment or {}, objects=objects or {})


began: weakref.WeakKeyDictionary[Engine, Started] = weakref.WeakKeyDictionary()


def park(pool, key, engine, shutdown, dead=lambda: None) -> bool:
    """What the adapter does when an engine's owner closes it: one handle, parked (False: stop it)."""
    known = began.get(engine)
    return pool.park(
        Stand(engine, None if known is None else replace(known, key=key), shutdown, dead), running()
    )


@pytest.fixture(autouse=True)
def here():
    """A context of its own: the pool reads ownership and holders from the process context."""
    mine = context.Context(HostPlatform(), load_settings("cpu", None, env={}))
    mine.owner.enter_test("test_x.py::test_one", "test_x.py")
    replaced = context.use(mine)
    yield mine
    context.use(replaced)


@pytest.fixture
def world(tmp_path):
    """(pool, alive engines, start(key, fraction), close(key, engine)) as VllmRunner drives the pool."""
    directory = tmp_path / "ledger"
    pool = Pool(LedgerWriter(directory, worker="main"))
    alive: set[Engine] = set()

    def start(key: str, fraction: float | None = 0.9) -> Engine:
        engine = pool.take(key, running())
        if engine is None:
            pool.make_room(fraction)  # what the instrumented vllm.LLM does before every start
            assert not alive, "a new engine would start beside a warm one"
            engine = Engine(key, alive)
            track(pool, engine, None)
        return engine

    def close(key: str, engine: Engine) -> None:
        if not park(pool, key, engine, alive.discard):
            alive.discard(engine)

    yield pool, alive, start, close, directory


def test_the_next_start_of_a_configuration_gets_the_warm_engine_and_is_recorded(world):
    pool, alive, start, close, directory = world
    first = start("A")
    close("A", first)
    assert alive == {first}  # warm
    second = start("A")
    assert second is first
    close("A", second)
    reuses = ledger.read(directory).reuses
    assert [(r["fingerprint"], r["test"], r["worker"]) for r in reuses] == [
        ("A", "test_x.py::test_one", "main")
    ]


def test_a_start_of_another_configuration_shuts_the_warm_engine_down_first(world):
    pool, alive, start, close, _ = world
    a = start("A")
    close("A", a)
    b = start("B")  # start() asserts nothing else is alive when an engine is built
    assert alive == {b}
    close("B", b)
    assert start("A") is not a and a not in alive


def test_a_changed_engine_is_not_handed_on_and_the_reason_is_in_the_ledger(world):
    pool, alive, start, close, directory = world
    engine = start("A")
    engine.config["max_model_len"] = 7  # a test changed what the engine runs with
    close("A", engine)
    assert engine not in alive
    assert start("A") is not engine
    [refusal] = ledger.read(directory).refusals
    assert refusal["reason"] == "its configuration changed while in use (no reset undoes that)"
    assert refusal["test"] == "test_x.py::test_one"


def test_what_a_reset_undoes_is_undone_and_what_it_cannot_is_refused(world):
    pool, alive, start, close, directory = world
    engine = start("A")
    engine.dirty = True
    close("A", engine)
    assert engine in alive and engine.dirty is False
    assert start("A") is engine
    engine.dirty = "stuck"
    close("A", engine)  # handed to this test: held for its replay until its outcome is known
    assert running().held and engine in alive
    pool.let_go(running())
    assert engine not in alive
    assert [r["reason"] for r in ledger.read(directory).refusals] == [
        "it was left asleep and did not wake up fully"
    ]


def test_the_fresh_engine_marker_gets_a_new_engine_and_leaves_nothing_warm(world):
    pool, alive, start, close, directory = world
    warm = start("A")
    close("A", warm)
    running().mode = FRESH
    fresh = start("A")
    assert fresh is not warm and alive == {fresh}
    close("A", fresh)
    assert not alive
    assert "fresh_engine" in ledger.read(directory).refusals[0]["reason"]


def test_a_warm_engine_is_not_handed_to_a_start_under_another_vllm_environment(world):
    pool, alive, start, close, directory = world
    engine = Engine("A", alive)
    track(pool, engine, _Run(0.3), "A-1", "A", {"VLLM_USE_V2_MODEL_RUNNER": "1"})
    close("A-1", engine)
    other = want("A-0", "A", {"VLLM_USE_V2_MODEL_RUNNER": "0", "HF_HUB_OFFLINE": "1"})
    assert pool.take("A-0", running(), other) is None
    assert (
        pool.take("B", running(), want("B", "B")) is None
    )  # another configuration altogether: nothing to say
    [refusal] = ledger.read(directory).refusals
    assert refusal["runner"] == "main-1" and refusal["fingerprint"] == "A-1"
    assert refusal["reason"] == (
        "the environment vLLM reads differs from its start's "
        "(HF_HUB_OFFLINE=None -> '1', VLLM_USE_V2_MODEL_RUNNER='1' -> '0')"
    )
    assert pool.take("A-1", running(), want("A-1", "A", {"VLLM_USE_V2_MODEL_RUNNER": "1"})) is engine


def test_a_fresh_engine_test_shuts_every_warm_engine_down_and_says_why(world):
    pool, alive, start, close, directory = world
    a = start("A")
    close("A", a)
    context.current().test = Terms("test_x.py::test_fresh", FRESH)  # what the safety-net plugin sets
    pool.fresh_test(running())
    assert not alive and not pool.warm
    fresh = start("A")
    close("A", fresh)  # started under the marker: refused although the pool's flag is read, not passed
    assert not alive
    assert [(r["test"], r["reason"]) for r in ledger.read(directory).refusals] == [
        ("test_x.py::test_fresh", "the next test asked for a fresh engine (fresh_engine marker)"),
        ("test_x.py::test_fresh", "the test asked for a fresh engine (fresh_engine marker)"),
    ]


def test_an_engine_its_owner_stops_again_while_parked_is_not_handed_on(world):
    pool, alive, start, close, _ = world
    engine = start("A")
    close("A", engine)
    assert pool.holds(engine, running())
    close("A", engine)  # its owner's second shutdown: the one park drops it, and its owner stops it
    assert not alive and not pool.holds(engine, running()) and start("A") is not engine


def test_more_warm_engines_only_when_configured_and_their_fractions_fit(tmp_path):
    alive: set[Engine] = set()
    pool = Pool(LedgerWriter(tmp_path, worker="main"), capacity=3)

    def parked(key: str, fraction: float) -> Engine:
        engine = Engine(key, alive)
        track(pool, engine, _Run(fraction))
        assert park(pool, key, engine, alive.discard)
        return engine

    a, b = parked("A", 0.3), parked("B", 0.3)
    assert alive == {a, b}
    pool.make_room(0.3)  # fits beside both
    assert alive == {a, b}
    pool.make_room(0.5)  # the oldest goes
    assert alive == {b}
    pool.close()
    assert not alive


class _Run:
    """What the pool reads of a recorded run: its id, model, declared fraction and startup seconds."""

    def __init__(self, fraction: float):
        self.id, self.model, self.startup_s = "main-1", "m", 30.0
        self.need = type("Need", (), {"fraction": fraction})()


def test_a_failed_tests_engines_are_shut_down_and_what_it_closes_after_is_not_parked(world):
    pool, alive, start, close, directory = world
    parked = start("A")
    close("A", parked)
    later = start("B")  # shuts the warm A down first (capacity 1)
    pool.failed(running())
    close("B", later)
    assert not alive and not pool.warm
    previous, context.current().test = running(), Terms("test_x.py::test_two")
    pool.begin(running(), previous)
    engine = start("B")
    close("B", engine)
    assert pool.warm and alive == {engine}  # the next test parks again
    assert [r["reason"] for r in ledger.read(directory).refusals] == ["its test failed"]


def test_an_engine_that_died_while_warm_is_not_handed_on(world):
    pool, alive, _, _, directory = world
    engine = Engine("A", alive)
    track(pool, engine, None, "A")
    died: list[str] = []
    assert park(pool, "A", engine, alive.discard, lambda: died[0] if died else None)
    died.append("its engine process 4242 exited (-9)")
    assert pool.take("A", running()) is None and not alive and not pool.warm
    [refusal] = ledger.read(directory).refusals
    assert refusal["reason"] == "its engine process 4242 exited (-9)"


def test_a_forked_test_finds_no_engine_reuse_kept_and_parks_nothing(world):
    """vLLM's fork_new_process_for_each_test: the parent's warm engines give way before the fork (without
    reuse they would be gone; at vLLM's default share any of them blocked the child's start), the child's
    pool is empty, and what the child closes is not parked."""
    pool, alive, start, close, directory = world
    warm = start("A")
    close("A", warm)
    pid = os.fork()
    if pid == 0:  # the child: any failure is its exit status
        code = 1
        try:
            assert pool.take("A", running()) is None and not pool.warm
            own = Engine("A", alive)
            track(pool, own, None)
            close("A", own)
            code = 0 if own not in alive and not pool.warm else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert warm not in alive and not pool.warm  # shut down before the fork
    reasons = [r["reason"] for r in sorted(ledger.read(directory).refusals, key=lambda r: r["t"])]
    assert reasons[0].startswith("a test forks a process: warm engines give way")
    assert len([r for r in reasons if r.startswith("it is closed in a forked test's process")]) == 1
    assert start("A") is not warm


def test_a_fork_within_a_start_leaves_warm_engines(world):
    """vLLM forks its engine process while it starts one (harness.tracking.starts marks that on the
    context): not a forked test, so warm engines stay."""
    pool, alive, start, close, _ = world
    warm = start("A")
    close("A", warm)
    context.current().starting.active = True
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
    finally:
        context.current().starting.active = False
    os.waitpid(pid, 0)
    assert warm in alive and start("A") is warm


def test_refusals_are_counted_by_kind_of_reason():
    refusals = [
        {"reason": "its engine process 1 exited (-9)"},
        {"reason": "its test failed"},
        {"reason": "resetting it failed: TimeoutError: 30 s"},
        {"reason": "its test failed"},
        {"reason": None},
    ]
    assert ledger.refused_because(refusals) == [
        ("its test failed", 2),
        ("its engine process 1 exited", 1),
        ("no reason", 1),
        ("resetting it failed", 1),
    ]


def test_a_refusal_names_the_argument_that_holds_another_object(world):
    """Under the same environment, a start whose argument holds another object (not data) used to be
    refused as "the environment vLLM reads differs from its start's ()": naming nothing, the wrong cause."""
    pool, alive, start, close, directory = world
    engine = Engine("A", alive)
    track(pool, engine, _Run(0.3), "A-1", "A", {"VLLM_X": "1"}, {"hf_overrides": [11]})
    close("A-1", engine)
    assert pool.take("A-2", running(), want("A-2", "A", {"VLLM_X": "1"}, {"hf_overrides": [12]})) is None
    wanted = want("A-3", "A", {"VLLM_X": "1", "SECRET_TOKEN": "s3cr3t"}, {"hf_overrides": [11]})
    assert pool.take("A-3", running(), wanted) is None
    reasons = [r["reason"] for r in ledger.read(directory).refusals]
    assert reasons == [
        "hf_overrides holds another object than at its start (an object that is not data is compared by "
        "identity)",
        "the environment vLLM reads differs from its start's (SECRET_TOKEN)",  # a name, not its value
    ]


def test_an_engine_a_thread_left_by_its_test_can_reach_is_refused_at_its_park_and_at_the_tests_end(world):
    """The reuse residue (issue 58) over stand-ins: a thread the test started that still holds the engine
    keeps it from the pool, whether it was started before the close (refused at the park) or after it
    (refused when the test's teardown is over); once it has ended, an engine parks again. Each thread waits
    on an event: what it holds is the same whenever the check runs."""
    pool, alive, start, close, directory = world
    context.current().test = Terms("test_x.py::test_one")  # what the safety-net plugin sets at setup
    go = threading.Event()
    engine = start("A")
    early = threading.Thread(target=lambda: go.wait() and engine, name="early")
    early.start()
    close("A", engine)  # the thread can still send it a request: not kept
    assert not pool.warm and engine not in alive
    go.set()
    early.join()  # ended: it reaches nothing any more
    other = start("A")
    close("A", other)
    assert pool.warm and other in alive
    late = threading.Timer(600, lambda: other)
    late.start()  # after the close
    pool.ended(running())
    assert not pool.warm and other not in alive
    late.cancel()
    late.join()
    reasons = [r["reason"] for r in ledger.read(directory).refusals]
    assert [r.split(" (")[0] for r in reasons] == ["a thread its test left running can still reach it"] * 2
    assert "early (thread)" in reasons[0] and "(timer)" in reasons[1]
