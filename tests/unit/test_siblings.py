"""The live runners of a worker's other processes are holders here, read from their ledger files: a real
second process writes its runner's start; once it has exited (its file's lock gone), it holds nothing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from harness.config.settings import Settings
from harness.ledger.writer import LedgerWriter
from harness.platform.host import HostPlatform
from harness.tracking import siblings
from harness.tracking.context import Context

SERVER = """
    import json
    import sys
    from harness.ledger.writer import LedgerWriter

    writer = LedgerWriter(sys.argv[1], worker="main.4242")
    owner = dict(test="t.py::test_a", file="t.py", fixture="server", scope="module", worker="main")
    declared = json.loads(sys.argv[3])  # what else its runner-start says (its declared share)
    writer.write("runner-start", id="main.4242-1", kind="vllm", model="m", fingerprint="f", config={},
                 **owner, phase=None, devices=["cpu"], need_bytes=int(sys.argv[2]), mem_before={}, **declared)
    writer.write("runner-started", id="main.4242-1", startup_s=30.0, mem_after_start={},
                 held_after_start={"cpu": 2**30})
    print("started", flush=True)
    sys.stdin.read()  # alive until the test closes its stdin
"""


def _serving(tmp_path, share: float, config: str) -> tuple[Context, subprocess.Popen]:
    """This process's context and a second process whose runner declared ``share`` of the device."""
    context = Context(HostPlatform(), Settings())
    total = context.platform.devices()[0].total_bytes
    context.writer = LedgerWriter(tmp_path, worker="main")
    server = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SERVER), str(tmp_path), str(int(total * share)), config],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return context, server


def test_another_process_live_runner_is_a_holder_until_it_exits(tmp_path):
    context, server = _serving(tmp_path, 0.5, "{}")
    try:
        assert server.stdout.readline() == "started\n"
        siblings.refresh(context)
        [holder] = context.holders.on()
        assert holder.label == "vllm runner `m` of another process (main.4242.jsonl)"
        assert (holder.owner.fixture, holder.owner.scope, holder.fraction) == ("server", "module", 0.5)
        assert holder.pinned() and holder.used_bytes == {0: 2**30}
        siblings.refresh(context)  # refreshed, not doubled
        assert len(context.holders.on()) == 1
    finally:
        server.communicate("")
    siblings.refresh(context)
    assert context.holders.on() == []


def test_a_holder_declares_the_share_its_runner_declared(tmp_path):
    """Bytes over this process's reading of the device drift with that reading (a server's 0.5 read as
    0.41 once): the share its runner-start records is the one it declared."""
    context, server = _serving(tmp_path, 0.41, '{"fraction": 0.5}')
    try:
        assert server.stdout.readline() == "started\n"
        siblings.refresh(context)
        [holder] = context.holders.on()
        assert holder.fraction == 0.5
    finally:
        server.communicate("")


def test_a_forked_childs_inherited_holder_is_not_counted_again_from_its_parents_file(tmp_path):
    """A forked child holds its parent's runners already (inherited holders); read again from the parent's
    ledger file they were counted twice ("of another process" too), blocking the child's start."""
    from harness.memory.admission import Holder

    context, server = _serving(tmp_path, 0.5, "{}")
    try:
        assert server.stdout.readline() == "started\n"
        # this process plays the child: the other process's runner is one it inherited
        context.holders.hold(
            Holder(key="main.4242-1", label="inherited", owner=None, devices=(0,), fraction=0.5)
        )
        siblings.refresh(context)
        assert [holder.label for holder in context.holders.on()] == ["inherited"]
    finally:
        server.communicate("")
