"""load_settings: defaults per platform, tables, env overrides, validation naming the key."""

import dataclasses
import json
import textwrap
from typing import Annotated, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.config.pyproject import find_pyproject
from harness.config.settings import Settings, load_settings
from harness.config.validate import Bounds, Count, Text, fields_of, from_text, hints
from harness.errors import ConfigError
from harness.failures import CLASSES


@pytest.fixture(autouse=True)
def _away_from_the_repo_pyproject(tmp_path, monkeypatch):
    """pyproject=None looks upwards from the current directory; keep the repo's own table out of it."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def pyproject(tmp_path):
    def write(text):
        path = tmp_path / "pyproject.toml"
        path.write_text(textwrap.dedent(text))
        return path

    return write


def test_defaults_per_platform(tmp_path):
    missing = None
    cuda, rocm, cpu = (load_settings(name, missing, env={}) for name in ("cuda", "rocm", "cpu"))
    assert (cuda.settle, rocm.settle, cpu.settle) == (False, True, False)
    assert (cuda.shutdown_timeout_s, rocm.shutdown_timeout_s) == (None, 60.0)
    assert (cuda.test_timeout_s, rocm.test_timeout_s, cpu.test_timeout_s) == (900.0, 1800.0, 900.0)
    assert rocm.settle_floor_gib == 4.0 and rocm.settle_ratio == 0.05 and rocm.settle_timeout_s == 240.0
    tolerances = (cuda.release_tolerance_gib, rocm.release_tolerance_gib, cpu.release_tolerance_gib)
    assert tolerances == (0.5, 0.5, 2.0)


def test_platform_table_overrides_top_level_and_env_overrides_both(pyproject):
    path = pyproject(
        """
        [tool.harness]
        settle_floor_gib = 3
        block_grace_s = 2.5
        [tool.harness.rocm]
        settle_floor_gib = 6
        shutdown_timeout_s = 90
        [tool.harness.cuda]
        settle = true
        """
    )
    rocm = load_settings("rocm", path, env={"HARNESS_BLOCK_GRACE_S": "1.5"})
    assert (rocm.settle_floor_gib, rocm.shutdown_timeout_s, rocm.block_grace_s) == (6.0, 90.0, 1.5)
    assert isinstance(rocm.settle_floor_gib, float)
    cuda = load_settings("cuda", path, env={})
    assert (cuda.settle, cuda.settle_floor_gib, cuda.shutdown_timeout_s) == (True, 3.0, None)


@pytest.mark.parametrize(
    ("variable", "text", "key", "value"),
    [
        ("HARNESS_SETTLE", "yes", "settle", True),
        ("HARNESS_SETTLE", "0", "settle", False),
        ("HARNESS_CPU_WORKERS", "2", "cpu_workers", 2),
        ("HARNESS_PHASE_TIMEOUT_S", "3600", "phase_timeout_s", 3600.0),
        ("HARNESS_SHUTDOWN_TIMEOUT_S", "none", "shutdown_timeout_s", None),
        ("HARNESS_LEDGER_DIR", "/tmp/ledger", "ledger_dir", "/tmp/ledger"),
        ("HARNESS_OVERLAP", "warn", "overlap", "warn"),
    ],
)
def test_env_values_are_parsed_to_the_key_type(variable, text, key, value):
    assert getattr(load_settings("rocm", None, env={variable: text}), key) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[tool.harness.rocm]\nsettle_floor_gib = 'x'",
            "[tool.harness.rocm] settle_floor_gib: expected a number between 0 and 1e+07, got 'x'",
        ),
        ("[tool.harness]\nsetle = true", "[tool.harness] setle: unknown key (known: settle, "),
        ("[tool.harness.cuda]\nsettle = 1", "[tool.harness.cuda] settle: expected a boolean, got 1"),
        (
            "[tool.harness]\ncpu_workers = 1.5",
            "[tool.harness] cpu_workers: expected an integer between 1 and 512, got 1.5",
        ),
        (
            "[tool.harness]\ncpu_workers = 0",
            "[tool.harness] cpu_workers: expected an integer between 1 and 512, got 0",
        ),
        (
            "[tool.harness]\nsettle_timeout_s = -1",
            "[tool.harness] settle_timeout_s: expected a number between 0 and 1e+07, got -1",
        ),
        (
            "[tool.harness]\nsettle_ratio = 5",
            "[tool.harness] settle_ratio: expected a number between 0 and 1, got 5",
        ),
        ("[tool.harness]\nledger_dir = 3", "[tool.harness] ledger_dir: expected a string or null, got 3"),
        ("[tool.harness]\nrocm = 4", "[tool.harness] rocm: expected a table, got 4"),
        (
            "[tool.harness]\noverlap = 'allow'",
            "[tool.harness] overlap: expected 'block' or 'warn', got 'allow'",
        ),
        (
            "[tool.harness]\nblock_grace_s = true",
            "[tool.harness] block_grace_s: expected a number between 0 and 1e+07, got True",
        ),
    ],
)
def test_bad_tables_name_the_key(pyproject, text, message):
    path = pyproject(text)
    with pytest.raises(ConfigError) as error:
        load_settings("cuda", path, env={})
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_other_platforms_tables_are_validated_too(pyproject):
    path = pyproject("[tool.harness.rocm]\nsettle_flor_gib = 4")
    with pytest.raises(ConfigError, match=r"^\[tool.harness.rocm\] settle_flor_gib: unknown key"):
        load_settings("cpu", path, env={})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"HARNESS_SETTLE_FLOOR_GIB": "x"},
            "HARNESS_SETTLE_FLOOR_GIB: expected a number between 0 and 1e+07, got 'x'",
        ),
        ({"HARNESS_SETTLE": "maybe"}, "HARNESS_SETTLE: expected a boolean, got 'maybe'"),
        ({"HARNESS_OVERLAP": "off"}, "HARNESS_OVERLAP: expected 'block' or 'warn', got 'off'"),
        (
            {"HARNESS_CPU_WORKERS": "auto"},
            "HARNESS_CPU_WORKERS: expected an integer between 1 and 512, got 'auto'",
        ),
        (
            {"HARNESS_SETTLE_TIMEOUT_S": "none"},
            "HARNESS_SETTLE_TIMEOUT_S: expected a number between 0 and 1e+07, got 'none'",
        ),
        (
            {"HARNESS_WORKERS_PER_GPU": "0"},
            "HARNESS_WORKERS_PER_GPU: expected an integer between 1 and 512, got 0",
        ),
    ],
)
def test_bad_env_overrides_name_the_variable(env, message):
    with pytest.raises(ConfigError) as error:
        load_settings("cuda", None, env=env)
    assert str(error.value) == message


def test_suites_and_ci_tables_pass_through(pyproject):
    path = pyproject(
        """
        [tool.harness]
        cpu_workers = 1
        [tool.harness.suites.pooling]
        phases = [{name = "single", paths = ["tests/models/pooling"]}]
        [tool.harness.ci]
        platforms = ["cpu"]
        """
    )
    assert load_settings("cuda", path, env={}) == Settings()


def test_unrelated_harness_variables_are_not_keys():
    assert load_settings("cuda", None, env={"HARNESS_PLATFORM": "cuda", "HARNESS_PHASE": "x"}) == Settings()


def test_broken_toml_names_file_and_line(pyproject):
    path = pyproject("[tool.harness]\nsettle = true\nsettle_ratio = = 0.1\n")
    with pytest.raises(ConfigError) as error:
        load_settings("cpu", path, env={})
    assert str(error.value).startswith(f"{path}: invalid TOML: ")
    assert "line 3" in str(error.value)


def test_nearest_pyproject_upwards(pyproject, tmp_path, monkeypatch):
    path = pyproject("[tool.harness.cpu]\ncpu_workers = 2")
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert find_pyproject() == path
    assert load_settings("cpu", env={}).cpu_workers == 2


def test_settings_are_frozen():
    with pytest.raises(AttributeError):
        Settings().settle = True  # type: ignore[misc]


def test_unknown_platform_name():
    with pytest.raises(ConfigError, match="platform 'tpu'"):
        load_settings("tpu", None, env={})


@pytest.mark.parametrize("text", ["nan", "inf"])
def test_non_finite_numbers_are_refused_by_name(text):
    """nan compares false with every bound: a nan block_grace_s made admission poll forever."""
    with pytest.raises(ConfigError, match=rf"^HARNESS_BLOCK_GRACE_S: expected a finite number, got {text}"):
        load_settings("cuda", None, env={"HARNESS_BLOCK_GRACE_S": text})


@dataclasses.dataclass
class _Table:
    workers: Literal["per-gpu", "serial"] | Count = "per-gpu"
    names: tuple[Text, ...] = ()
    ratio: Annotated[float, Bounds(0, 1)] | None = None
    queues: dict[str, str] = dataclasses.field(default_factory=dict)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"workers": 0}, "[t] workers: expected 'per-gpu', 'serial' or an integer ≥ 1, got 0"),
        ({"workers": True}, "[t] workers: expected 'per-gpu', 'serial' or an integer ≥ 1, got True"),
        ({"names": ["a", ""]}, "[t] names: expected a list of non-empty strings, got ['a', '']"),
        ({"ratio": 2}, "[t] ratio: expected a number between 0 and 1 or null, got 2"),
        ({"ratio": float("nan")}, "[t] ratio: expected a finite number, got nan"),
        ({"queues": {"cuda": 1}}, "[t] queues: expected a table of strings, got {'cuda': 1}"),
        ({"worker": 1}, "[t] worker: unknown key (known: workers, names, ratio, queues)"),
    ],
)
def test_one_validator_reads_types_from_type_objects(given, message):
    """Types, limits and wording come from the dataclass's resolved hints, never from annotation text."""
    with pytest.raises(ConfigError) as error:
        fields_of("[t]", given, hints(_Table))
    assert str(error.value) == message


def test_the_validator_converts_to_the_field_type():
    given = {"workers": 2, "names": ["a"], "ratio": 1, "queues": {"cuda": "q"}}
    assert fields_of("[t]", given, hints(_Table)) == {
        "workers": 2,
        "names": ("a",),
        "ratio": 1.0,
        "queues": {"cuda": "q"},
    }
    assert isinstance(fields_of("[t]", {"ratio": 1}, hints(_Table))["ratio"], float)
    assert from_text("HARNESS_T", "serial", hints(_Table)["workers"]) == "serial"
    assert from_text("HARNESS_T", "3", hints(_Table)["workers"]) == 3


@given(st.lists(st.sampled_from(sorted(CLASSES)), max_size=6), st.sampled_from([",", ", ", " , "]))
@settings(max_examples=200, deadline=None)
def test_a_list_setting_from_the_environment_is_the_tables_list(tmp_path_factory, names, comma):
    """``HARNESS_<KEY>`` overrides every key (docs/settings.md): a list as JSON or comma-separated gives
    what the table gives. Old code: ``HARNESS_RETRY=network`` was refused ("expected a list of non-empty
    strings, got 'network'") and no list could come from the environment."""
    path = tmp_path_factory.mktemp("p") / "pyproject.toml"
    path.write_text(f"[tool.harness]\nretry = {json.dumps(names)}\n")
    table = load_settings("cpu", path, env={}).retry
    assert load_settings("cpu", path, env={"HARNESS_RETRY": comma.join(names)}).retry == table
    assert load_settings("cpu", path, env={"HARNESS_RETRY": json.dumps(names)}).retry == table


@pytest.mark.parametrize("text", ["[", '["network"', "[" * 5000, '{"a": 1}', "nonsense", "network,nonsense"])
def test_a_bad_list_from_the_environment_is_one_config_error(tmp_path, text):
    path = tmp_path / "pyproject.toml"
    path.write_text("[tool.harness]\n")
    with pytest.raises(ConfigError, match="HARNESS_RETRY|nonsense"):
        load_settings("cpu", path, env={"HARNESS_RETRY": text})
