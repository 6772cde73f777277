"""GitHub Actions' ``${{ }}`` expressions, evaluated as the runner does, for the workflow tests.

The part of the language the shipped workflows use: literals, context properties (``.`` and ``[]``,
names case-insensitive, a missing one is null), ``!``, ``==``, ``!=``, ``&&``, ``||``, parentheses,
``format``, ``fromJSON`` and ``contains``. ``&&`` and ``||`` give one of their operands, not a boolean;
``==`` compares strings ignoring case and values of two types as numbers (null is 0, a non-numeric
string NaN), as GitHub's documentation of expressions says. Checked against GitHub's own evaluator (npm
``@actions/expressions`` 0.3.61) on the shipped workflows' expressions with fork, same-repository and
push payloads: the same results (``contains``, added for the compare job, from the documentation alone).
"""

from __future__ import annotations

import json
import math
import re

_TOKEN = re.compile(
    r"\s*(?:(?P<string>'(?:[^']|'')*')|(?P<number>\d+(?:\.\d+)?)|(?P<op>==|!=|&&|\|\||[!().\[\],])"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))"
)
_EXPRESSION = re.compile(r"\$\{\{((?:(?!\}\}).)*)\}\}", re.S)


def evaluate(text: str, contexts: dict):
    """A workflow value: one whole ``${{ }}`` gives its value; text around expressions gives a string."""
    whole = _EXPRESSION.fullmatch(text.strip())
    if whole:
        return _Parser(whole.group(1), contexts).parse()
    return _EXPRESSION.sub(lambda match: to_string(_Parser(match.group(1), contexts).parse()), text)


def truthy(value) -> bool:
    return value not in (None, False, 0, "") and not (isinstance(value, float) and math.isnan(value))


def to_string(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def _number(value) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool | int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip()) if value.strip() else 0.0
        except ValueError:
            return math.nan
    return math.nan


def _equal(left, right) -> bool:
    if isinstance(left, str) and isinstance(right, str):
        return left.casefold() == right.casefold()
    if isinstance(left, dict | list) or isinstance(right, dict | list):
        return left is right
    return _number(left) == _number(right)


def _index(value, key):
    if isinstance(value, dict):
        found = {str(name).casefold(): item for name, item in value.items()}
        return found.get(str(key).casefold())
    if isinstance(value, list) and isinstance(key, int | float) and 0 <= key < len(value):
        return value[int(key)]
    return None


def _format(template: str, *args) -> str:
    return re.sub(r"\{(\d+)\}", lambda match: to_string(args[int(match.group(1))]), template)


def _contains(search, item) -> bool:
    """An array holding ``item`` (compared as ``==`` does), or a string holding it, ignoring case."""
    if isinstance(search, list):
        return any(_equal(entry, item) for entry in search)
    return to_string(item).casefold() in to_string(search).casefold()


_FUNCTIONS = {"format": _format, "fromjson": json.loads, "contains": _contains}


class _Parser:
    """Recursive descent, lowest precedence first: ``||``, ``&&``, ``==``/``!=``, ``!``, access."""

    def __init__(self, source: str, contexts: dict):
        self.tokens, position = [], 0
        while position < len(source.rstrip()):
            match = _TOKEN.match(source, position)
            if not match:
                raise ValueError(f"cannot read {source[position:]!r}")
            self.tokens.append((match.lastgroup, match.group(match.lastgroup)))
            position = match.end()
        self.contexts, self.at = contexts, 0

    def parse(self):
        value = self._or()
        if self.at != len(self.tokens):
            raise ValueError(f"unexpected {self.tokens[self.at]}")
        return value

    def _peek(self, text: str) -> bool:
        return self.at < len(self.tokens) and self.tokens[self.at] == ("op", text)

    def _take(self, text: str) -> None:
        if not self._peek(text):
            raise ValueError(f"expected {text!r} at token {self.at}")
        self.at += 1

    def _or(self):
        value = self._and()
        while self._peek("||"):
            self.at += 1
            right = self._and()
            value = value if truthy(value) else right
        return value

    def _and(self):
        value = self._equality()
        while self._peek("&&"):
            self.at += 1
            right = self._equality()
            value = right if truthy(value) else value
        return value

    def _equality(self):
        value = self._not()
        while self._peek("==") or self._peek("!="):
            negate = self.tokens[self.at][1] == "!="
            self.at += 1
            value = _equal(value, self._not()) != negate
        return value

    def _not(self):
        if self._peek("!"):
            self.at += 1
            return not truthy(self._not())
        return self._access(self._primary())

    def _access(self, value):
        while self._peek(".") or self._peek("["):
            if self._peek("."):
                self.at += 1
                value = _index(value, self.tokens[self.at][1])
                self.at += 1
            else:
                self.at += 1
                key = self._or()
                self._take("]")
                value = _index(value, key)
        return value

    def _primary(self):
        kind, text = self.tokens[self.at]
        self.at += 1
        if kind == "string":
            return text[1:-1].replace("''", "'")
        if kind == "number":
            return float(text)
        if (kind, text) == ("op", "("):
            value = self._or()
            self._take(")")
            return value
        if kind != "name":
            raise ValueError(f"unexpected {text!r}")
        literals = {"true": True, "false": False, "null": None}
        if text in literals:
            return literals[text]
        if self._peek("("):
            self.at += 1
            args = [] if self._peek(")") else [self._or()]
            while self._peek(","):
                self.at += 1
                args.append(self._or())
            self._take(")")
            return _FUNCTIONS[text.lower()](*args)
        return _index(self.contexts, text)
