"""Options declared once (harness.config.options): one precedence; both parsers' help from one place."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.cli import _parser
from harness.config import options
from harness.config.settings import Settings
from harness.errors import ConfigError

pytest_plugins = ["pytester"]

WITH_VARIABLE = [o for o in (*options.RUN, *options.PYTEST) if o.key is None]
WITH_KEY = [o for o in (*options.RUN, *options.PYTEST) if o.key is not None]
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8)


@given(
    option=st.sampled_from([o for o in WITH_VARIABLE if not o.switch and not o.choices]),
    flag=st.none() | TEXT.filter(bool),
    variable=st.none() | TEXT,
)
def test_a_flag_wins_then_its_variable_then_the_default(option, flag, variable):
    env = {} if variable is None else {option.variable: variable}
    expected = flag if flag is not None else variable if variable else option.default
    assert options.value(option, flag, env) == expected


@given(option=st.sampled_from(WITH_KEY), flag=st.booleans() | st.none(), setting=st.booleans())
def test_an_option_with_a_key_takes_the_settings_value_unless_its_flag_is_given(option, flag, setting):
    """The key's variable is already over the key in ``Settings`` (load_settings): the flag goes over both."""
    value = "/set" if option.key == "ledger_dir" or option.key == "baseline" else setting
    settings = Settings(**{option.key: value})
    given_flag = ("/flag" if flag else None) if not option.switch else flag
    found = options.value(option, given_flag, {}, settings)
    assert found == (given_flag if given_flag else value)


@pytest.mark.parametrize("text", ["1", "0", "", "yes"])
def test_a_switch_variable_turns_it_on_with_1_only(text):
    assert options.value(options.HARNESS, False, {"HARNESS": text}) is (text == "1")
    assert options.value(options.HARNESS, True, {"HARNESS": text}) is True


def test_a_variable_outside_the_choices_is_one_line_naming_it():
    with pytest.raises(ConfigError, match=r"^HARNESS_GPU_FREE 'all': expected one of deselect, only$"):
        options.value(options.GPU_FREE_OPTION, None, {"HARNESS_GPU_FREE": "all"})
    assert options.value(options.GPU_FREE_OPTION, None, {"HARNESS_GPU_FREE": ""}) is None  # empty: off


def test_each_options_help_names_where_else_it_comes_from():
    for option in (*options.RUN, *options.PYTEST):
        for variable in option.variables:
            assert f"${variable}" in option.described()
        if option.key:
            assert f"[tool.harness] {option.key}" in option.described()
    assert options.BASELINE.described().endswith("(default: $HARNESS_BASELINE, else [tool.harness] baseline)")


def test_harness_run_parses_the_declared_flags_and_shows_their_help():
    run = _parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    shown = run.format_help().replace("\n", " ")
    for option in options.RUN:
        assert option.flags[0] in shown
    args = run.parse_args(["pooling"])
    assert all(getattr(args, option.dest) is None for option in options.RUN)  # not given: value decides
    args = run.parse_args(["pooling", "--gpu-free", "only", "--history", "h.json"])
    assert (args.gpu_free, args.history) == ("only", "h.json")


def test_the_plugins_flags_come_from_the_declaration(pytester):
    result = pytester.runpytest_subprocess("--help")
    shown = " ".join(result.stdout.str().split())
    for option in options.PYTEST:
        assert option.flags[0] in shown
    assert "$HARNESS_LEDGER_DIR, else [tool.harness] ledger_dir" in shown


def test_argparse_and_pytest_take_the_same_keywords():
    parser = argparse.ArgumentParser()
    options.add_arguments(parser, *options.PYTEST)
    parsed = parser.parse_args(["--harness-reuse", "--harness-durations", "d.json"])
    assert (parsed.harness_reuse, parsed.harness_durations, parsed.harness) == (True, "d.json", False)
