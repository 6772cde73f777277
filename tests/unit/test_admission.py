"""The admission check over memory readings: declared fractions, measured shortage, named holders."""

from __future__ import annotations

import math

import pytest

from harness.errors import RunnerBlocked
from harness.ledger.owner import Owner
from harness.memory import admission
from harness.platform.base import MemoryReading

GIB = 2**30
MODULE_OWNER = Owner("t.py::test_first", "t.py", "engine", "module", "main", None)
BODY_OWNER = Owner("t.py::test_first", "t.py", None, None, "main", None)  # built in a test body


@pytest.fixture
def live():
    """This test's holders (a process keeps one registry, in its context)."""
    return admission.Holders()


def _memory(used_gib: float, total_gib: float = 80):
    return lambda: {0: MemoryReading(int(used_gib * GIB), int(total_gib * GIB))}


def _engine(
    live,
    fraction: float,
    key="gw0-1",
    used_gib: float | None = None,
    total_gib: float = 80,
    owner=MODULE_OWNER,
):
    """A live engine that declared ``fraction`` and uses all of it (a decoder) or ``used_gib``."""
    declared = int(fraction * total_gib * GIB)
    used = declared if used_gib is None else int(used_gib * GIB)
    live.hold(admission.Holder(key, "vllm runner `m`", owner, (0,), {0: used}, fraction, declared))


def _admit(live, need, used_gib, grace_s=0.2, total_gib=80, **policy):
    waited = []
    admission.admit(
        "vllm runner `new`",
        need,
        holders=live,
        memory=_memory(used_gib, total_gib),
        grace_s=grace_s,
        wait=waited.append,
        **policy,
    )
    return waited


def test_fits_without_waiting(live):
    assert _admit(live, admission.Need((0,), 40 * GIB, 0.5), used_gib=1) == []


def test_declared_fractions_past_one_block_even_when_measured_memory_is_free(live):
    _engine(live, 0.6)
    with pytest.raises(RunnerBlocked) as error:
        _admit(live, admission.Need((0,), int(0.6 * 80 * GIB), 0.6), used_gib=2)  # CPU: KV cache untouched
    message = str(error.value)
    assert "together 1.2 > 1" in message
    assert "fixture `engine` is module-scoped and lives until the end of t.py" in message
    assert "started in t.py::test_first" in message
    assert "\n" not in message


def test_measured_shortage_explained_by_a_holder_blocks(live):
    live.hold(admission.Holder("f", "fixture `tensor`", MODULE_OWNER, (0,), {0: 60 * GIB}))
    with pytest.raises(
        RunnerBlocked, match=r"device 0 has 19.00 GiB free.*fixture `tensor` \(uses 60.00 GiB"
    ):
        _admit(live, admission.Need((0,), 30 * GIB), used_gib=61)


def test_shortage_nobody_here_explains_goes_to_the_platform_wait(live):
    _engine(live, 0.1)  # 8 GiB: freeing it would not make 70 GiB fit
    need = admission.Need((0,), 70 * GIB, None)
    assert _admit(live, need, used_gib=20) == [need]


def test_holders_on_other_devices_do_not_count(live):
    _engine(live, 0.9)
    two = {0: MemoryReading(75 * GIB, 80 * GIB), 1: MemoryReading(GIB, 80 * GIB)}
    admission.admit(
        "x",
        admission.Need((1,), 40 * GIB, 0.5),
        holders=live,
        memory=lambda: two,
        grace_s=0,
        wait=pytest.fail,
    )
    with pytest.raises(RunnerBlocked):
        admission.admit(
            "x",
            admission.Need((0,), 40 * GIB, 0.5),
            holders=live,
            memory=lambda: two,
            grace_s=0,
            wait=pytest.fail,
        )


def test_a_holder_released_during_the_grace_lets_the_runner_start(live):
    _engine(live, 0.6, owner=BODY_OWNER)  # a runner dropped in a test body may still be collected
    readings = iter([_memory(50)(), _memory(50)(), _memory(1)()])

    def memory():
        reading = next(readings)
        if reading[0].used_bytes < 2 * GIB:
            live.release("gw0-1")
        return reading

    # a grace without end: only the release, never the clock, lets this start go on
    admission.admit(
        "x",
        admission.Need((0,), 40 * GIB, None),
        holders=live,
        memory=memory,
        grace_s=math.inf,
        wait=pytest.fail,
    )


def _counted(read):
    """``read`` and a list that grows by one at each call of it."""
    reads: list[int] = []

    def counting():
        reads.append(1)
        return read()

    return reads, counting


def test_holders_fixtures_own_block_at_once_after_one_collection(live):
    """A fixture's value lives until its scope ends: no grace, only the look after the gc pass."""
    _engine(live, 0.6)
    reads, memory = _counted(_memory(50))
    with pytest.raises(RunnerBlocked):
        admission.admit(
            "x",
            admission.Need((0,), 40 * GIB, None),
            holders=live,
            memory=memory,
            grace_s=1,
            wait=pytest.fail,
        )
    assert len(reads) == 2  # before and after the collection; the old grace polled for a second


def test_shares_fixtures_declared_block_without_a_collection(live):
    """No garbage collection frees a runner a fixture keeps, nor its declared share: the full collection
    (about 0.5 s on the H200 with vLLM loaded) is skipped and the start is blocked at once."""
    import gc

    _engine(live, 0.92)
    collections = []

    def count(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(count)
    try:
        with pytest.raises(RunnerBlocked, match="declared 0.92"):
            _admit(live, admission.Need((0,), None, 0.92), used_gib=1, grace_s=5)
    finally:
        gc.callbacks.remove(count)
    assert 2 not in collections  # the harness asked for no full collection


def test_the_grace_stays_when_any_explaining_holder_could_still_be_collected(live):
    """One of the two holders a fixture keeps, the other a test body dropped: the start is not blocked after
    the collection's look, it looks again (a grace without end: the third look finds both gone)."""
    _engine(live, 0.3)
    _engine(live, 0.3, key="gw0-2", owner=BODY_OWNER)
    reads, read = _counted(_memory(50))

    def memory():
        if len(reads) == 2:  # the third look: both went meanwhile
            live.release("gw0-1")
            live.release("gw0-2")
            return _memory(1)()
        return read()

    admission.admit(
        "x",
        admission.Need((0,), 40 * GIB, None),
        holders=live,
        memory=memory,
        grace_s=math.inf,
        wait=pytest.fail,
    )
    assert len(reads) == 2


def test_the_grace_ends_in_a_block_naming_the_holders(live):
    _engine(live, 0.3)
    _engine(live, 0.3, key="gw0-2", owner=BODY_OWNER)
    reads, memory = _counted(_memory(50))
    with pytest.raises(RunnerBlocked, match="held by vllm runner `m`"):
        admission.admit(
            "x",
            admission.Need((0,), 40 * GIB, None),
            holders=live,
            memory=memory,
            grace_s=0,
            wait=pytest.fail,
        )
    assert len(reads) == 2  # before and after the collection; a grace already over looks no more


def test_unknown_need_is_admitted(live):
    _engine(live, 0.9)
    assert _admit(live, admission.Need((0,), None, None), used_gib=79) == []


# The H200 (139.8 GiB by torch): a module-scoped engine at 0.92, then a test's own engine at 0.92.
H200_GIB = 139.8
SECOND = admission.Need((0,), int(0.92 * H200_GIB * GIB), 0.92)


def test_a_holder_is_shown_as_declared_and_as_measured(live):
    """Encoder-only MiniLM: it declared 0.92 of the H200 and used 1.4 GiB (no KV cache); the message said
    it kept "129.17 GiB", the declared share printed as if measured."""
    _engine(live, 0.92, used_gib=1.4, total_gib=H200_GIB)
    with pytest.raises(RunnerBlocked) as error:
        _admit(live, SECOND, used_gib=2, total_gib=H200_GIB)
    assert "vllm runner `m` (declares 0.92 = 128.62 GiB; uses 1.40 GiB, started in t.py::test_first)" in str(
        error.value
    )


def test_warn_lets_an_over_declared_start_go_on_when_measured_memory_fits(live):
    """As plain vLLM does for the encoder: the second engine starts beside the first, with a finding."""
    _engine(live, 0.92, used_gib=1.4, total_gib=H200_GIB)
    warned = []
    assert _admit(live, SECOND, used_gib=2, total_gib=H200_GIB, overlap="warn", warn=warned.append) == []
    (message,) = warned
    assert "together 1.84 > 1" in message and 'overlap = "warn"' in message and "uses 1.40 GiB" in message


def test_warn_still_blocks_a_start_the_measured_memory_cannot_hold(live):
    """A decoder takes its whole share: plain vLLM failed after 2.2 s with "Free memory on device cuda:0
    (9.87/139.8 GiB) on startup is less than desired GPU memory utilization", the holder unnamed."""
    _engine(live, 0.92, total_gib=H200_GIB)
    warned = []
    with pytest.raises(RunnerBlocked) as error:
        _admit(live, SECOND, used_gib=H200_GIB - 9.87, total_gib=H200_GIB, overlap="warn", warn=warned.append)
    assert "device 0 has 9.87 GiB free of 139.80 GiB" in str(error.value)
    assert "declares 0.92 = 128.62 GiB; uses 128.62 GiB" in str(error.value)
    assert len(warned) == 1
