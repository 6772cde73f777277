"""The plugin's terminal summary (``harness.pytest_plugin.terminal``) ends every session it reads a ledger in,
whatever lines the ledger holds: a finding the reader made of a bad line has no time of its own (issue 50,
item 8: it ended the summary with a KeyError, exit 1 and a traceback)."""

from __future__ import annotations

import json

from harness.ledger.check import FIELDS
from harness.ledger.notable import NOTABLE

pytest_plugins = ["pytester"]

T = 1_750_000_000.0
# every event kind that makes a session read its ledger back: a line without its time, and one with each of
# its fields a list (the reader skips each with a finding that has no time)
CASES = {f"{event} without t": {"event": event} for event in NOTABLE} | {
    f"{event} with {name} a list": {"event": event, "t": T, name: [[]]}
    for event in NOTABLE
    for name in FIELDS[event]
}


def test_bad_ledger_lines_are_findings_in_the_terminal_summary_not_a_traceback(pytester, monkeypatch):
    """Every case above in one foreign ledger file: each is one finding line, and the session's own exit."""
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    lines = "".join(json.dumps(CASES[case]) + "\n" for case in sorted(CASES))
    pytester.makepyfile(
        test_x=f"""
import pathlib

def test_writes_foreign_lines():
    pathlib.Path("led", "foreign.jsonl").write_text({lines!r})
"""
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--harness", "--harness-ledger-dir", "led"
    )
    assert result.ret == 0, result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(
        [f"*harness: {len(CASES)} findings*"]
        + [f"*bad-ledger-line: foreign.jsonl line {n} skipped*" for n in range(1, len(CASES) + 1)]
    )


def test_a_finding_line_without_its_time_is_one_finding(pytester, monkeypatch):
    """The line the issue names: a ``finding`` event whose ``t`` is missing."""
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    line = json.dumps({"event": "finding", "type": "crash", "message": "m"})
    pytester.makepyfile(
        test_x=f"""
import pathlib

def test_writes_it():
    pathlib.Path("led", "foreign.jsonl").write_text({line + chr(10)!r})
"""
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--harness", "--harness-ledger-dir", "led"
    )
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(["*bad-ledger-line: foreign.jsonl line 1 skipped: field 't'*"])
