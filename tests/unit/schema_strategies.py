"""Hypothesis strategies derived from the report schema's types (``harness.report.schema``), the way the
loader derives its checks from them: every value a strategy draws is one the loader must accept, and the
leaves of a value paired with their types say where a hostile file can be wrong."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from hypothesis import strategies as st

from harness.config.validate import Bounds, mismatch

MOST = 2**63 - 1  # the largest integer a report holds (19 digits)
HOSTILE_TEXT = st.sampled_from(
    ["", "x", "tests/t.py", "<img src=x onerror=alert(1)>", "a|b`c\nd\re", "[bold]x[/bold]", "é∆😀", "None"]
)
TEXT = st.one_of(HOSTILE_TEXT, st.text(st.characters(exclude_categories=("Cs",)), max_size=12))
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MOST, MOST)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)


def fields(kind: Any) -> tuple[dict[str, Any], set[str]]:
    """A ``TypedDict``'s resolved hints and required keys (``Required``/``NotRequired`` read from them)."""
    hints = typing.get_type_hints(kind, include_extras=True)
    required = {
        name
        for name, hint in hints.items()
        if typing.get_origin(hint) is typing.Required
        or (kind.__total__ and typing.get_origin(hint) is not typing.NotRequired)
    }
    return hints, required


def of(kind: Any) -> st.SearchStrategy:
    """Values of ``kind`` as the loader reads them: JSON values within every ``Bounds``."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Required, typing.NotRequired):
        return of(args[0])
    if origin is Annotated:
        bounds = next((m for m in kind.__metadata__ if isinstance(m, Bounds)), Bounds())
        return _bounded(args[0], bounds)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(of(arm) for arm in args))
    if origin is Literal:
        return st.sampled_from(args)
    if origin is list:
        return st.lists(of(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(TEXT, of(args[1]), max_size=3)
    if typing.is_typeddict(kind):
        hints, required = fields(kind)
        return st.fixed_dictionaries(
            {name: of(hint) for name, hint in hints.items() if name in required},
            optional={name: of(hint) for name, hint in hints.items() if name not in required},
        )
    return {
        Any: JSON,
        bool: st.booleans(),
        int: st.integers(-MOST, MOST),
        float: st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**53), 2**53),
        str: TEXT,
        type(None): st.none(),
    }[kind]


def _bounded(base: Any, bounds: Bounds) -> st.SearchStrategy:
    low, high = bounds.low, bounds.high
    if base is str:
        return TEXT.filter(lambda text: bounds.hold(text))
    if base is int:
        return st.integers(int(low) if low is not None else -MOST, int(high) if high is not None else MOST)
    floats = st.floats(low, high, allow_nan=False, allow_infinity=False, exclude_min=bounds.above)
    edges = [v for v in (low, high, 0.0, 1.0) if v is not None and bounds.hold(v)]
    return floats | st.sampled_from(edges) if edges else floats


def leaves(value: Any, kind: Any, steps: tuple = ()) -> Iterator[tuple[tuple, Any, Any]]:
    """``(steps, value, kind)`` for every value below ``value`` whose type is a plain one (``Any`` left
    out: it takes every value); ``named(steps)`` is where the loader says it is (``phases[0].wall_s``)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Required, typing.NotRequired):
        yield from leaves(value, args[0], steps)
    elif origin is Annotated:
        yield steps, value, kind
    elif origin in (typing.Union, types.UnionType):
        arms = [arm for arm in args if mismatch(value, arm) is None]
        if arms:
            yield from leaves(value, arms[0], steps)
    elif origin is list and isinstance(value, list):
        for i, item in enumerate(value):
            yield from leaves(item, args[0], (*steps, i))
    elif origin is dict and isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, args[1], (*steps, key))
    elif typing.is_typeddict(kind) and isinstance(value, dict):
        hints, _ = fields(kind)
        for name, item in value.items():
            if name in hints:
                yield from leaves(item, hints[name], (*steps, (name,)))
    elif kind is not Any and (origin is None or origin is Literal) and not typing.is_typeddict(kind):
        yield steps, value, kind


def named(steps: tuple) -> str:
    """How the loader names a place: ``.field`` for a schema field, ``[i]`` and ``['key']`` below."""
    text = ""
    for step in steps:
        text += f".{step[0]}" if isinstance(step, tuple) else f"[{step!r}]"
    return text.lstrip(".")


def put(document: Any, steps: tuple, value: Any) -> Any:
    """``document`` with the value at ``steps`` replaced, in place."""
    target = document
    for step in steps[:-1]:
        target = target[step[0] if isinstance(step, tuple) else step]
    last = steps[-1]
    target[last[0] if isinstance(last, tuple) else last] = value
    return document
