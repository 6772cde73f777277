"""A pytest plugin for benchmarks/line_in_situ.py: in one harness session, the ledger's test lines go to a
mapped file and to a one-``write``-a-line file (``harness.ledger.files``) in turn, a block of tests each;
each test's wall (from its start to the next test's) is noted with the kind its line went to, and the
medians of each kind are written as one JSON line to ``$LINE_TOGGLE_FILE`` at the end. Within one
process, the host's speed for that process is alike for both kinds; across processes it is not."""

from __future__ import annotations

import json
import os
import statistics
import time

import pytest

from harness.ledger import files

BLOCK = 50  # tests a kind, in turn
NOTED: list[tuple[int, str]] = []  # (perf_counter_ns at a test's start, the kind its line goes to)
STATE: dict = {"kind": "mapped", "tests": 0}


def pytest_runtest_logstart(nodeid: str, location) -> None:
    NOTED.append((time.perf_counter_ns(), STATE["kind"]))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """The session's writer exists by now; the appended file sits beside its mapped one."""
    writer = session.config.pluginmanager.get_plugin("harness-recorder").writer
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    appended = files.Appended(os.open(writer.directory / "appended.jsonl", flags, 0o644), 0)
    STATE.update(writer=writer, files={"mapped": writer._file, "appended": appended})


@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid: str, location) -> None:
    STATE["tests"] += 1
    if STATE["tests"] % BLOCK == 0:
        STATE["kind"] = "appended" if STATE["kind"] == "mapped" else "mapped"
        STATE["writer"]._file = STATE["files"][STATE["kind"]]


def pytest_unconfigure(config: pytest.Config) -> None:
    if "writer" in STATE:
        STATE["writer"]._file = STATE["files"]["mapped"]  # the session's own, closed as always
    walls: dict[str, list[int]] = {"mapped": [], "appended": []}
    for (began, kind), (following, other) in zip(NOTED[BLOCK:-1], NOTED[BLOCK + 1 :], strict=True):
        if kind == other:  # both ends in one block
            walls[kind].append(following - began)
    with open(os.environ["LINE_TOGGLE_FILE"], "a") as file:
        file.write(json.dumps({kind: statistics.median(ns) / 1e3 for kind, ns in walls.items()}) + "\n")
