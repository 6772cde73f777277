"""The one validator of harness tables (``[tool.harness]``, suite tables and ``[tool.harness.ci]``) and of
the JSON files the harness reads back (``mismatch``: a value against a ``TypedDict``'s hints, unchanged).

A table's keys and types come from the dataclass it fills (``typing.get_type_hints``, so from type objects,
never annotation text); limits ride on the type as ``Annotated[..., Bounds(...)]``. Every problem is one
``ConfigError`` in one style, ``<where> <key>: expected <what>, got <value>``, or ``<where> <key>: unknown
key (known: ...)``.
"""

from __future__ import annotations

import contextlib
import json
import math
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal, NamedTuple, NoReturn

from harness.errors import ConfigError


class Bounds(NamedTuple):
    """Limits a value keeps: numbers by value, strings and lists by length."""

    low: float | None = None
    high: float | None = None
    above: bool = False  # low itself is excluded
    off: bool = False  # 0 is allowed too, meaning "off"

    def hold(self, value: Any) -> bool:
        size = len(value) if isinstance(value, str | tuple | list) else value
        if self.off and size == 0:
            return True
        if self.low is not None and (size <= self.low if self.above else size < self.low):
            return False
        return self.high is None or size <= self.high

    def describe(self, noun: str) -> str:
        if noun == "a string" or noun.startswith(("a list", "an array")):
            return f"a non-empty {noun.split(' ', 1)[1]}" if self.low else noun
        if self.low is not None and self.high is not None and self.above:
            return f"{noun} > {self.low:g} and ≤ {self.high:g}"
        if self.low is not None and self.high is not None:
            return f"{'0 (off) or ' if self.off else ''}{noun} between {self.low:g} and {self.high:g}"
        return f"{noun} {'>' if self.above else '≥'} {self.low:g}"


Count = Annotated[int, Bounds(1)]
# more worker processes than this is a typo (10**9), not a machine: each one imports the suite's conftest
Workers = Annotated[int, Bounds(1, 512)]
# seconds and GiB past this are a typo, not a setting (1e20 s overflows the timer pytest-timeout arms)
MOST = 1e7
Amount = Annotated[float, Bounds(0, MOST)]
Positive = Annotated[float, Bounds(0, MOST, above=True)]
Text = Annotated[str, Bounds(1)]

_WRONG = object()
_NOUNS = {
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    dict: "a table",
    list: "an array of tables",
    Any: "any value",
}
_TRUE, _FALSE, _NULL = ("1", "true", "yes", "on"), ("0", "false", "no", "off"), ("", "none", "null")


def hints(cls: type) -> dict[str, Any]:
    """A record class's fields (a ``NamedTuple``'s or a dataclass's) and their types, resolved to type
    objects (``Annotated`` limits kept)."""
    return typing.get_type_hints(cls, include_extras=True)


def expected(label: str, what: str, value: Any) -> NoReturn:
    raise ConfigError(f"{label}: expected {what}, got {value!r}")


def table(label: str, value: Any) -> dict[str, Any]:
    """``value`` if it is a TOML table."""
    if not isinstance(value, dict):
        expected(label, "a table", value)
    return value


def known(where: str, given: Iterable[str], names: Iterable[str]) -> None:
    """Every key of ``given`` is one of ``names`` (listed, in their order, when one is not)."""
    names = list(names)
    for key in given:
        if key not in names:
            raise ConfigError(f"{where} {key}: unknown key (known: {', '.join(names)})")


def fields_of(where: str, given: Mapping[str, Any], kinds: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of one table checked against ``kinds`` and converted (ints to floats, lists to tuples)."""
    known(where, given, kinds)
    return {key: check(f"{where} {key}", value, kinds[key]) for key, value in given.items()}


def check(label: str, value: Any, kind: Any) -> Any:
    """``value`` as ``kind``, else a ``ConfigError`` naming ``label``, what it expects and what it got."""
    if isinstance(value, float) and not math.isfinite(value) and _accepts(kind, float):
        expected(label, "a finite number", value)  # nan compares false both ways: bounds cannot catch it
    result = _convert(value, kind)
    if result is _WRONG:
        expected(label, describe(kind), value)
    return result


def from_text(label: str, text: str, kind: Any) -> Any:
    """An environment variable's text as ``kind``: ``1/true/yes/on``, ``0/false/no/off`` for booleans,
    ``none``/``null``/empty for null where the key may be null; a list or table as JSON, a list of
    strings also comma-separated (``HARNESS_RETRY=network,timeout``)."""
    word = text.strip().lower()
    if _accepts(kind, type(None)) and word in _NULL:
        return None
    if _container(kind):
        return check(label, _structure(label, text, kind), kind)
    readings: list[Any] = []
    for base in sorted(_bases(kind), key=lambda base: base is str):  # the text as a string last
        if base is bool and word in _TRUE + _FALSE:
            readings.append(word in _TRUE)
        elif base in (int, float, str):
            with contextlib.suppress(ValueError):
                readings.append(base(text))
    fitting = [value for value in readings if _convert(value, kind) is not _WRONG]
    return check(label, (fitting or readings or [text])[0], kind)


def _container(kind: Any) -> bool:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    return _container(args[0]) if origin is Annotated else origin in (list, tuple, dict)


def _structure(label: str, text: str, kind: Any) -> Any:
    """A container's text: JSON where it opens as JSON does, else the comma-separated items of a list."""
    if text.strip()[:1] in ("[", "{"):
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as error:
            expected(label, f"{describe(kind)} (JSON: {error})", text)
    if typing.get_origin(kind) is dict:
        expected(label, f"{describe(kind)} (as JSON)", text)
    return [item.strip() for item in text.split(",") if item.strip()]


def describe(kind: Any) -> str:
    """``kind`` in words: ``'per-gpu', 'serial' or an integer ≥ 1``."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Annotated:
        bounds = [meta for meta in kind.__metadata__ if isinstance(meta, Bounds)]
        text = describe(args[0])
        return bounds[0].describe(text) if bounds else text
    if origin in (typing.Union, types.UnionType) or origin is Literal:
        words = [w for arm in args if arm is not type(None) for w in _words(arm, origin is Literal)]
        words += ["null"] if type(None) in args else []
        return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]
    if origin is tuple:
        return f"a list of {describe(args[0]).split(' ', 1)[1]}s"
    if origin is dict:
        return f"a table of {describe(args[1]).split(' ', 1)[1]}s"
    if origin is list:
        return f"a list of {describe(args[0]).split(' ', 1)[1]}s"
    if typing.is_typeddict(kind):
        return "an object"
    return _NOUNS.get(origin or kind, str(kind))


def _words(arm: Any, literal: bool) -> list[str]:
    """One union arm (or literal value) in words; a ``Literal`` arm gives each of its values."""
    if literal:
        return [repr(arm)]
    if typing.get_origin(arm) is Literal:
        return [repr(value) for value in typing.get_args(arm)]
    return [describe(arm)]


def _convert(value: Any, kind: Any) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Annotated:
        result = _convert(value, args[0])
        limits = [meta for meta in kind.__metadata__ if isinstance(meta, Bounds)]
        return result if result is _WRONG or all(b.hold(result) for b in limits) else _WRONG
    if origin in (typing.Union, types.UnionType):
        return next((r for arm in args if (r := _convert(value, arm)) is not _WRONG), _WRONG)
    if origin is Literal:
        return value if any(type(value) is type(a) and value == a for a in args) else _WRONG
    if origin is tuple:
        items = [_convert(item, args[0]) for item in value] if isinstance(value, list | tuple) else [_WRONG]
        return _WRONG if _WRONG in items else tuple(items)
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            return _WRONG
        entries = {k: _convert(v, args[1]) for k, v in value.items()}
        return _WRONG if _WRONG in entries.values() else entries
    return _scalar(value, kind)


def _scalar(value: Any, kind: Any) -> Any:
    if kind is type(None):
        return value if value is None else _WRONG
    if kind is float:
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else _WRONG
    if kind is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _WRONG
    return value if isinstance(value, kind) else _WRONG


def _bases(kind: Any) -> list[Any]:
    """The plain types ``kind`` is made of, for parsing text."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Annotated:
        return _bases(args[0])
    if origin in (typing.Union, types.UnionType):
        return [base for arm in args for base in _bases(arm)]
    return list(dict.fromkeys(type(value) for value in args)) if origin is Literal else [kind]


def _accepts(kind: Any, base: type) -> bool:
    return base in _bases(kind)


def mismatch(value: Any, kind: Any, where: str = "") -> tuple[str, str, Any] | None:
    """Where a JSON value (``json.loads``'s) is not of ``kind``, what belongs there and what is there; None
    when it is of ``kind``.

    ``kind`` is built of ``TypedDict`` (its required keys present; keys it does not name pass, so a newer
    writer's additions are read), ``list[X]``, ``dict[str, X]``, unions, ``Literal``, ``Annotated`` with
    ``Bounds``, ``Any`` and plain types; an ``int`` is a ``float`` too, a bool is neither. Nothing is
    converted: the caller keeps the value it checked.
    """
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Required, typing.NotRequired):
        return mismatch(value, args[0], where)
    if origin is Annotated:
        inner = mismatch(value, args[0], where)
        bounds = [meta for meta in kind.__metadata__ if isinstance(meta, Bounds)]
        if inner is None and not all(b.hold(value) for b in bounds):
            return where, describe(kind), value
        return inner
    if origin in (typing.Union, types.UnionType):
        if any(mismatch(value, arm) is None for arm in args):
            return None
        shaped = [arm for arm in args if _shaped(value, arm)]  # the arm the value is trying to be
        return mismatch(value, shaped[0], where) if len(shaped) == 1 else (where, describe(kind), value)
    if origin is list:
        if not isinstance(value, list):
            return where, describe(kind), value
        return next(
            (m for i, item in enumerate(value) if (m := mismatch(item, args[0], f"{where}[{i}]"))), None
        )
    if origin is dict:
        if not isinstance(value, dict):
            return where, describe(kind), value
        return next(
            (m for key, item in value.items() if (m := mismatch(item, args[1], f"{where}[{key!r}]"))), None
        )
    if typing.is_typeddict(kind):
        return _record_mismatch(value, kind, where)
    if kind is Any:
        return None
    if origin is Literal:
        return (
            None
            if any(type(value) is type(a) and value == a for a in args)
            else (where, describe(kind), value)
        )
    return None if _scalar(value, kind) is not _WRONG else (where, describe(kind), value)


_FIELDS: dict[Any, tuple[dict[str, Any], set[str]]] = {}  # a TypedDict's fields, once a process


def _fields(kind: Any) -> tuple[dict[str, Any], set[str]]:
    """A ``TypedDict``'s resolved hints and its required keys, from the hints (``__required_keys__`` takes
    every string annotation as required, so it misses ``NotRequired`` under ``from __future__ import
    annotations``)."""
    fields = hints(kind)
    wrapped = {name: typing.get_origin(hint) for name, hint in fields.items()}
    required = {
        name
        for name, origin in wrapped.items()
        if origin is typing.Required or (kind.__total__ and origin is not typing.NotRequired)
    }
    return fields, required


def _record_mismatch(value: Any, kind: Any, where: str) -> tuple[str, str, Any] | None:
    if not isinstance(value, dict):
        return where, "an object", value
    fields, required = _FIELDS.get(kind) or _FIELDS.setdefault(kind, _fields(kind))
    missing = [name for name in fields if name in required and name not in value]
    if missing:
        return f"{where}.{missing[0]}".lstrip("."), "a value (the field is missing)", None
    for name, item in value.items():
        if name in fields and (found := mismatch(item, fields[name], f"{where}.{name}".lstrip("."))):
            return found
    return None


def _shaped(value: Any, kind: Any) -> bool:
    """Whether ``value`` is the container ``kind`` is (an object for a ``TypedDict`` or a table, a list for
    a list): then a problem inside it is named where it is, not as the whole union's."""
    origin = typing.get_origin(kind)
    if origin is Annotated:
        return _shaped(value, typing.get_args(kind)[0])
    if origin is dict or typing.is_typeddict(kind):
        return isinstance(value, dict)
    return origin is list and isinstance(value, list)
