"""Step timeouts from the recorded durations of a suite's last build (``harness ci buildkite --history``).

The rule, stated once: the shards' predicted seconds (the history's recorded test seconds split as this
step will split them, ``harness.split.plan`` over the history's units), their ``PERCENTILE``th percentile
(nearest rank: with a few shards, the slowest), times ``FACTOR``, plus ``MARGIN_MIN`` minutes, rounded up,
never more than the setting (``timeout_in_minutes``) and never less than ``LEAST_MIN``. vLLM set its AMD
step timeouts to the mean of 10 nightlies + 20 min (#54695) and found one too tight (#56114): one build's
history, read at a high percentile with a factor for its noise, is what this stands on. Without a usable
history the setting's bound stands. Every value written is one ``[tool.harness.ci] timeout_in_minutes``
accepts, so the harness's own parser reads it back (issue 50's rule).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from harness import split
from harness.ci.matrix import CI_KINDS
from harness.config.validate import check
from harness.report.previous import History

PERCENTILE = 95
FACTOR = 1.5
MARGIN_MIN = (
    20  # covers pytest's start and collection, an image pull and harness run's 10-minute report margin
)
LEAST_MIN = MARGIN_MIN  # less would leave harness run no time before its report margin
NEARS = 0.8  # a shard (or a test) whose recorded time passes this share of its timeout is a finding


def percentile(values: Iterable[float], rank: float = PERCENTILE) -> float | None:
    """The nearest-rank percentile of the usable values (finite, not negative); None without one."""
    usable = sorted(v for v in values if isinstance(v, int | float) and math.isfinite(v) and v >= 0)
    if not usable:
        return None
    return usable[max(0, math.ceil(rank / 100 * len(usable)) - 1)]


def minutes(seconds: Iterable[float], bound: int) -> int:
    """A step's ``timeout_in_minutes`` from its shards' predicted seconds (the rule in the module doc):
    the bound where no value is usable; always within ``LEAST_MIN``..``bound`` (the bound wins)."""
    bound = check("timeout_in_minutes", bound, CI_KINDS["timeout_in_minutes"])
    found = percentile(seconds)
    if found is None:
        return bound
    wanted = min(found, split.LONGEST) * FACTOR / 60 + MARGIN_MIN
    return min(bound, max(LEAST_MIN, math.ceil(wanted)))


def predicted(history: History, count: int) -> list[float]:
    """The seconds each of ``count`` shards would take, from a history's recorded test seconds: the
    split ``harness run`` makes (``History.plan``: whole files)."""
    if not history.seconds:
        return []
    return list(history.plan(sorted(history.seconds), count).predicted)


def for_cell(history: History, count: int, bound: int) -> tuple[int, str]:
    """The cell's timeout and where it came from (for a YAML comment or a log line): the history's
    predicted shards (a report of the cell's own suite and platform: ``harness.ci.learned``), or the
    setting's bound where there is no usable history."""
    if history.note is not None:
        return minutes([], bound), f"{history.note}; the setting's {bound} min"
    shards = predicted(history, count)
    found = percentile(shards)
    value = minutes(shards, bound)
    if found is None:
        return value, f"no recorded durations in {history.source}: the setting's {bound} min"
    return value, (
        f"p{PERCENTILE} of {len(shards)} shards' recorded {found:.0f} s x {FACTOR} + {MARGIN_MIN} min "
        f"(at most {bound}): {value} min"
    )
