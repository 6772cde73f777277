"""What no file of a run may carry: credentials, removed from the data before it is written.

A credential is the value of an environment variable or a command-line option named like one
(``HF_TOKEN``, ``DB_PASSWORD``, ``--hf-token=…``, ``--api-key X``), and the user and password of a URL.
Where the name is seen (an environment table, an argument list, ``NAME=value`` in a message) the value goes
whatever its length; elsewhere a value of ``SHORTEST`` characters or more goes wherever it appears, as
written and as Python's ``repr`` and JSON escape it (a failed assertion shows the ``repr``), and so does
its start or end of ``FRAGMENT`` characters or more (a repr cut short, ``'hf_abcdefgh...'``). Redacting the
data, never the written text, is what lets a value with XML, HTML, JSON or shell specials be found: once
serialized it reads escaped.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

# A name of words joined by ``_`` (or ``-``) whose word says credential: HF_TOKEN, DB_PASSWORD, API_KEY,
# GITHUB_PAT, --hf-token; never TOKENIZERS_PARALLELISM, PWD, PATH, KEYWORD or AUTHOR.
SECRET_NAME = re.compile(
    r"(^|_)[A-Z0-9]*(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|APIKEY)S?(_|$)"
    r"|(^|_)(KEY|PAT|PASS|AUTH|AUTHORIZATION)(_|$)",
    re.IGNORECASE,
)
# user:password@ (or token@) in a URL: https://user:token@host/simple
URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")
# NAME=value or --name=value in free text; the value bare, or quoted to its closing quote
ASSIGNED = re.compile(r"(?<![\w-])(?P<name>-{0,2}[A-Za-z_][\w-]*)=(?P<value>\"[^\"]*\"|'[^']*'|[^\s'\"]+)")
REDACTED = "[redacted]"
SHORTEST = 4  # a shorter value (on, 1, a tag) matched by value alone would redact ordinary text and markup
FRAGMENT = 8  # a secret's start or end this long is as good as the secret to whoever guesses the rest


def secret_name(name: str) -> bool:
    """Whether a variable, option or field named ``name`` carries a credential."""
    return bool(SECRET_NAME.search(name.lstrip("-").replace("-", "_")))


def option_values(args: Iterable[str]) -> list[str]:
    """The values of the options named like a credential in ``args``: ``--name=value``, ``--name value``."""
    args, found = list(args), []
    for i, arg in enumerate(args):
        if not arg.startswith("-"):
            continue
        name, equals, value = arg.partition("=")
        if not secret_name(name):
            continue
        if equals:
            found.append(value)
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            found.append(args[i + 1])
    return [value for value in found if value]


class Redactor:
    """The credentials of one run (``env``'s and ``args``'), taken out of text and JSON-like data."""

    def __init__(self, env: Mapping[str, str], args: Iterable[str] = ()) -> None:
        values = {value for name, value in env.items() if value and secret_name(name)}
        values.update(option_values(args))
        forms = {
            form
            for value in values
            if len(value) >= SHORTEST
            # as written, as repr and JSON escape it, and as XML escapes it (a torn JUnit file read as text)
            for form in (value, repr(value)[1:-1], json.dumps(value)[1:-1], html.escape(value))
        }
        longest_first = sorted(forms, key=len, reverse=True)
        cut = [pattern for form in longest_first if len(form) > FRAGMENT for pattern in _cut_short(form)]
        alternatives = [*map(re.escape, longest_first), *cut]
        self._values = re.compile("|".join(alternatives)) if alternatives else None

    def __bool__(self) -> bool:
        """Whether there is a value to look for (names and URLs are looked for anyway)."""
        return self._values is not None

    def text(self, text: str) -> str:
        """``text`` without URL credentials, named values (``NAME=value``) or known values."""
        if self._values is not None:
            text = self._values.sub(REDACTED, text)
        if "@" in text:
            text = URL_CREDENTIALS.sub(lambda match: match["scheme"] + REDACTED + "@", text)
        return ASSIGNED.sub(_assigned, text) if "=" in text else text

    def data(self, value: Any) -> Any:
        """Every string of a JSON-like value through ``text``; the value of a key named like a credential
        and the argument after an option named like one are redacted whole."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {
                self.data(key): REDACTED if _named(key, item) else self.data(item)
                for key, item in value.items()
            }
        if isinstance(value, list | tuple):
            return [
                REDACTED if i and _option(value[i - 1], item) else self.data(item)
                for i, item in enumerate(value)
            ]
        return value


def _cut_short(form: str) -> tuple[str, str]:
    """Patterns for ``form``'s start and its end, each of ``FRAGMENT`` characters or more, the longest
    found either way: nested optional groups, ``abcdefgh(?:i(?:j)?)?`` and ``(?:(?:a)?b)?cdefghij``."""
    head, tail = form[FRAGMENT:], form[:-FRAGMENT]
    start = re.escape(form[:FRAGMENT]) + "".join(f"(?:{re.escape(c)}" for c in head) + ")?" * len(head)
    end = "(?:" * len(tail) + "".join(f"{re.escape(c)})?" for c in tail) + re.escape(form[-FRAGMENT:])
    return start, end


def _named(name: Any, value: Any) -> bool:
    """Whether ``value`` is a credential by the name it comes under (a key, the option before it)."""
    return isinstance(name, str) and isinstance(value, str) and bool(value) and secret_name(name)


def _option(previous: Any, value: Any) -> bool:
    """Whether ``value`` is the argument of an option named like a credential (``--api-key X``)."""
    return (
        isinstance(previous, str) and previous[:1] == "-" and "=" not in previous and _named(previous, value)
    )


def _assigned(match: re.Match) -> str:
    """``NAME=value`` of a variable (upper case) or ``--name=value`` of an option named like a credential;
    a lower-case ``first_pass=True`` or ``sort_key=name`` in a test id or message is no credential."""
    name = match["name"]
    if not (name.startswith("-") or name.isupper()) or not secret_name(name):
        return match[0]
    quote = match["value"][0] if match["value"][0] in "'\"" else ""
    return f"{match['name']}={quote}{REDACTED}{quote}"
