"""Issue 58's seams, one fact each: a shard is the one ``Shard`` wherever merge reads it; a quarantined
test's crash is quarantined in every output; ``harness flaky`` counts a build once whether it comes merged,
as its shards, or both; failures first moves whole engine groups at every scope the split knows."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from harness import split
from harness.report.union import merge
from tests.unit.test_merge import shard_reports

# --- the one Shard: merge reads a report's shard as Shard.parse reads it, never as a second formatter ---

SPELLED = st.sampled_from(["{i}/{n}", " {i}/{n}", "{i}/{n} ", "0{i}/{n}", "{i}/0{n}", "00{i}/{n}"])


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 4), spelling=SPELLED, data=st.data())
def test_a_shard_spelled_any_way_shard_parse_reads_merges_as_that_shard(count, spelling, data):
    """A report's ``shard`` as any spelling ``Shard.parse`` accepts: merge accepts the shards and agrees
    with their recorded splits (old code compared its own ``"i/N"`` string with the spelling as written,
    and refused ``" 0/2"`` as having "recorded the split of 0/2")."""
    selection = [f"t/test_{i}.py::test_x" for i in range(6)]
    reports = shard_reports(selection, count)
    for index, report in enumerate(reports):
        if data.draw(st.booleans()):
            report["shard"] = spelling.format(i=index, n=count)
    merged = merge(copy.deepcopy(reports), [f"r{i}" for i in range(count)])
    assert merged["accounting"]["proven"] is True
    assert merged["shards"] == [str(split.Shard(i, count)) for i in range(count)]
