"""What a test leaves in a handed-on engine (the stub vLLM of test_patches.py, vLLM's shapes): compared as
a whole before a hand-off, reset where vLLM lets it be, and the engine quiet. Each test suite below runs
with reuse on; none of its outcomes may rest on the safety net's retry (``merged.reruns`` stays empty)."""

from __future__ import annotations

import dataclasses
import types

from harness.tracking.vllm import health, parking
from tests.unit.test_patches import OWN_RUNNER, REUSABLE

pytest_plugins = ["pytester", "tests.unit.vllm_stub"]

# vLLM 0.32's LLM as far as a reset reads it: request numbering, its profiler, a warning at its start
SHAPED = (
    REUSABLE
    + """
        import warnings

        warnings.warn("a constructor warning", UserWarning)
        self.request_counter = types.SimpleNamespace(counter=0)
        self.request_counter.reset = lambda: setattr(self.request_counter, "counter", 0)
        self.llm_engine._profile_session_active = False
        self.llm_engine.start_profile = lambda: setattr(self.llm_engine, "_profile_session_active", True)
        self.llm_engine.stop_profile = lambda: setattr(self.llm_engine, "_profile_session_active", False)
        self.llm_engine.engine_core.add_request = lambda request: None"""
)
HEAD = OWN_RUNNER.split("    @pytest.mark.parametrize")[0]


def _run(run_with_stub, monkeypatch, body: str):
    monkeypatch.setenv("HARNESS_REUSE", "1")
    result, merged = run_with_stub(HEAD + body, "-W", "ignore::UserWarning", engine=SHAPED)
    assert merged.reruns == [], "an outcome rested on the safety net's retry"
    return result, merged


def test_an_attribute_replaced_on_the_llm_is_not_handed_on(run_with_stub, monkeypatch):
    result, merged = _run(
        run_with_stub,
        monkeypatch,
        """
    def test_patches_its_llm():
        with Runner("org/model") as runner:
            runner.llm.generate = lambda *args: ["a fake answer"]


    def test_expects_a_plain_llm():
        with Runner("org/model") as runner:
            assert "generate" not in vars(runner.llm)
    """,
    )
    result.assert_outcomes(passed=2)
    [refusal] = merged.refusals
    assert refusal["reason"] == "its LLM attribute generate changed while in use (no reset undoes that)"


def test_request_numbering_and_the_profiler_are_reset_and_a_start_warning_is_warned_again(
    run_with_stub, monkeypatch
):
    result, merged = _run(
        run_with_stub,
        monkeypatch,
        """
    def test_leaves_state():
        with Runner("org/model") as runner:
            next_id = runner.llm.request_counter.counter = 7
            runner.llm.llm_engine.start_profile()


    def test_expects_a_fresh_engine():
        with pytest.warns(UserWarning, match="a constructor warning"), Runner("org/model") as runner:
            assert runner.llm.request_counter.counter == 0
            assert not runner.llm.llm_engine._profile_session_active
    """,
    )
    result.assert_outcomes(passed=2)
    assert len(merged.records) == 1 and len(merged.reuses) == 1


def test_an_engine_a_request_reached_after_its_close_is_not_handed_on(run_with_stub, monkeypatch):
    """A thread of the test enqueued a request just after the close; the check had run before it came."""
    result, merged = _run(
        run_with_stub,
        monkeypatch,
        """
    def test_a_late_request():
        with Runner("org/model") as runner:
            llm = runner.llm
        llm.llm_engine.engine_core.add_request(object())  # after the close, as a late thread would


    def test_next():
        with Runner("org/model"):
            pass
    """,
    )
    result.assert_outcomes(passed=2)
    assert len(merged.records) == 2 and merged.reuses == []
    [refusal] = merged.refusals
    assert refusal["reason"] == "a request reached it after its close (a thread of its test still used it)"


@dataclasses.dataclass
class SchedulerConfig:
    max_num_seqs: int = 8


@dataclasses.dataclass
class VllmConfig:
    """vLLM's VllmConfig prints a summary, not every field."""

    scheduler_config: SchedulerConfig = dataclasses.field(default_factory=SchedulerConfig)
    model_config: object = dataclasses.field(default_factory=types.SimpleNamespace)

    def __str__(self) -> str:
        return "VllmConfig(model=org/model)"


def test_a_config_edited_in_place_shows_in_the_state_though_its_text_does_not():
    engine = types.SimpleNamespace(vllm_config=VllmConfig())
    llm = types.SimpleNamespace(llm_engine=engine, get_tokenizer=lambda: None)
    before = health.state(llm)
    engine.vllm_config.scheduler_config.max_num_seqs = 1  # a limit read per request
    assert str(engine.vllm_config) == "VllmConfig(model=org/model)"
    assert health.state(llm) != before


def test_which_platforms_wait_for_memory_is_the_platforms_own_fact(monkeypatch):
    """The adapter kept its own table of platforms (names, display names): a platform says it itself."""
    from harness.config.settings import load_settings
    from harness.platform.host import HostPlatform
    from harness.tracking import context

    class Waiting(HostPlatform):
        name, display_name, gpu, waits_for_release = "newgpu", "NewGPU", True, True

    mine = context.Context(Waiting(), load_settings("cpu", None, env={}))
    replaced = context.use(mine)
    try:
        client = type("SyncMPClient", (), {})()
        engine = types.SimpleNamespace(engine_core=client, vllm_config=None, log_stats=False)
        llm = type("LLM", (), {})()
        llm.llm_engine = engine
        reason = parking.unparkable(llm, own=False)
    finally:
        context.use(replaced)
    assert reason == "vLLM's conftest waits on NewGPU for its memory to be given back after each runner"
