"""The options a flag, an environment variable or a ``[tool.harness]`` key can set, each declared once, as
nox's ``_options.py`` declares its own: its flags, its variable, its key, its default and its help.

``harness run``'s parser (argparse) and the pytest plugin's (pytest's own option parser) add their flags
from these declarations, and every reader asks ``value`` for the one precedence: a flag given on the
command line, else the environment variable, else the ``[tool.harness]`` key, else the default. A key's
variable is ``HARNESS_<KEY>`` and ``Settings`` has already put it over the key (``load_settings``: the
platform's table over the top level, the variable over both), so an option with a key takes the settings'
value. The help each parser shows names the variable and the key from the declaration, so the two cannot
drift apart.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, NamedTuple

from harness.config.variables import GPU_FREE, HISTORY, SWITCH
from harness.errors import ConfigError


class Option(NamedTuple):  # every pytest session imports it: a NamedTuple, not a frozen dataclass
    """One option. ``dest`` is the name each parser stores its flag under; ``switch`` options are flags
    without a value (``store_true``) whose variable turns them on with ``1``."""

    dest: str
    flags: tuple[str, ...]
    help: str
    variable: str | None = None  # read here, for an option without a key
    key: str | None = None  # a ``Settings`` field: its variable is HARNESS_<KEY>, read by load_settings
    default: Any = None
    switch: bool = False
    choices: tuple[str, ...] | None = None
    metavar: str | None = None

    @property
    def variables(self) -> tuple[str, ...]:
        """The environment variables that set it, as the help names them."""
        if self.key is not None:
            return (f"HARNESS_{self.key.upper()}",)
        return (self.variable,) if self.variable else ()

    def described(self) -> str:
        """The help with where else the option comes from, in the order they are taken."""
        sources = [f"${name}" for name in self.variables]
        if self.key is not None:
            sources.append(f"[tool.harness] {self.key}")
        if self.default is not None and not self.switch:
            sources.append(str(self.default))
        return f"{self.help} (default: {', else '.join(sources)})" if sources else self.help

    def arguments(self) -> tuple[tuple[str, ...], dict[str, Any]]:
        """``(flags, keywords)`` for ``add_argument`` and pytest's ``addoption`` alike: no default there, so
        a flag not given reads as None (False for a switch) and ``value`` takes the next source."""
        keywords: dict[str, Any] = {"dest": self.dest, "help": self.described()}
        if self.switch:
            keywords["action"] = "store_true"
        else:
            keywords["default"] = None
            if self.choices:
                keywords["choices"] = list(self.choices)
            if self.metavar:
                keywords["metavar"] = self.metavar
        return self.flags, keywords


def value(option: Option, given: Any, env: Mapping[str, str] = os.environ, settings: Any = None) -> Any:
    """The option's value: ``given`` (what the parser stored: None or False when the flag was not given),
    else its variable in ``env``, else its key in ``settings``, else its default. A variable outside the
    option's choices is a ``ConfigError``: one line naming it."""
    if given is not None and given is not False:
        return given
    if option.key is not None:  # its variable is already in the settings, over the key
        found = None if settings is None else getattr(settings, option.key)
        return (False if option.switch else option.default) if found is None else found
    text = env.get(option.variable) if option.variable else None
    if option.switch:
        return text == "1"
    if not text:  # unset or empty: not given
        return option.default
    if option.choices and text not in option.choices:
        raise ConfigError(f"{option.variable} {text!r}: expected one of {', '.join(option.choices)}")
    return text


def add_arguments(parser: Any, *declared: Option) -> None:
    """Each option's flags on an argparse parser (or a pytest option group: the same call)."""
    for option in declared:
        flags, keywords = option.arguments()
        add = getattr(parser, "addoption", None) or parser.add_argument
        add(*flags, **keywords)


# harness run's
HISTORY_OPTION = Option(
    "history",
    ("--history",),
    "a previous run of this suite (report.json or run dir), as CI restores it: its durations weigh the "
    "split, tests that failed there run first, engine groups stay together; one that is missing or cannot be "
    "used is one summary line ('no history: ...') and the run goes on",
    variable=HISTORY,
    metavar="REPORT",
)
DURATIONS_FROM = Option(
    "durations_from",
    ("--durations-from",),
    "a previous run (report.json or run dir): tests that started one engine configuration run one after "
    "another; with --shard, LPT sharding by its durations",
    variable="HARNESS_DURATIONS_FROM",
    metavar="REPORT",
)
GPU_FREE_OPTION = Option(
    "gpu_free",
    ("--gpu-free",),
    "the GPU-free tests the history lists ([tool.harness.ci] gpu_free_job sets the variable in generated "
    "CI): 'deselect' leaves them to the CPU job, 'only' runs just them (--platform cpu) and fails one that "
    "starts a runner; no history: nothing moves",
    variable=GPU_FREE,
    choices=("deselect", "only"),
)
BASELINE = Option(
    "baseline",
    ("--baseline",),
    "the base branch's report, run dir or folder of shard run dirs: the summary opens with before -> after; "
    "one that cannot be read is one line there",
    key="baseline",
    metavar="REPORT",
)
RUN = (DURATIONS_FROM, HISTORY_OPTION, GPU_FREE_OPTION, BASELINE)

# the pytest plugin's
HARNESS = Option(
    "harness",
    ("--harness",),
    "act in this session (as a [tool.harness] table in pyproject.toml does)",
    variable=SWITCH,
    switch=True,
)
LEDGER_DIR = Option(
    "harness_ledger_dir",
    ("--harness-ledger-dir",),
    "directory for the runner ledger, one <worker>.jsonl per worker; without one, a new temporary directory",
    key="ledger_dir",
)
REUSE = Option(
    "harness_reuse",
    ("--harness-reuse",),
    "keep a closed VllmRunner's engine warm for the next start of its configuration",
    key="reuse",
    switch=True,
)
DURATIONS = Option(
    "harness_durations",
    ("--harness-durations",),
    "durations for --num-shards: a report.json or run directory, a JUnit XML file or pytest-split's "
    ".test_durations; else .test_durations in the rootdir",
    variable=DURATIONS_FROM.variable,
    metavar="PATH",
)
PYTEST = (HARNESS, LEDGER_DIR, REUSE, DURATIONS)
