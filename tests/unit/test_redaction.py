"""Credentials never reach a run directory's files, whatever their length or characters, and nothing that
is not one is redacted (issue 35). The last test is the attack: a real ``harness run`` whose tests assert
on the secrets, so pytest's failure texts carry them."""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.ledger import LedgerWriter
from harness.ledger.redaction import REDACTED, Redactor, secret_name
from tests.unit.report_runs import Run

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "Pa&ss<w0rd>\"2024'"  # XML, HTML, JSON and shell specials at once
TOKEN = "hf_Tok3n&<x>\"y'z"


@pytest.mark.parametrize(
    "name", ["HF_TOKEN", "DB_PASSWORD", "--hf-token", "--api-key", "HARNESS_GITHUB_PAT",
             "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKENS", "MYSQL_PASSWD", "--password", "AUTH",
             "HARNESS_API_KEY_FILE"],
)  # fmt: skip
def test_names_that_carry_a_credential(name):
    assert secret_name(name)


@pytest.mark.parametrize(
    "name", ["PWD", "OLDPWD", "PATH", "TOKENIZERS_PARALLELISM", "KEYWORD", "GIT_AUTHOR_NAME", "--keyword",
             "MONKEY", "PYTEST_XDIST_AUTO_NUM_WORKERS", "HARNESS_PHASE", "--maxfail"],
)  # fmt: skip
def test_names_that_do_not(name):
    assert not secret_name(name)


def test_values_are_redacted_by_name_whatever_their_length_and_by_value_from_four_characters():
    redactor = Redactor({"DB_PASSWORD": PASSWORD, "SHORT_TOKEN": "abc", "PWD": "/work/project"})
    assert redactor.data({"HF_TOKEN": "x", "--api-key": "y"}) == {"HF_TOKEN": REDACTED, "--api-key": REDACTED}
    assert redactor.data(["-v", "--hf-token=a", "--api-key", "b", "--api-key=", "/work/project/t.py"]) == [
        "-v",
        f"--hf-token={REDACTED}",
        "--api-key",
        REDACTED,
        "--api-key=",
        "/work/project/t.py",
    ]
    message = f"assert {PASSWORD!r} == 'x' where DB_PASSWORD='{PASSWORD}' and SHORT_TOKEN=abc in /work/p"
    assert redactor.text(message) == (
        f"assert '{REDACTED}' == 'x' where DB_PASSWORD='{REDACTED}' and SHORT_TOKEN={REDACTED} in /work/p"
    )
    assert redactor.text("abc abcdef") == "abc abcdef"  # a short secret is matched by its name only
    assert redactor.text("test_x[first_pass=True-sort_key=name]") == "test_x[first_pass=True-sort_key=name]"
    assert redactor.text(json.dumps({"p": PASSWORD})) == f'{{"p": "{REDACTED}"}}'


def test_pwd_and_paths_below_it_survive_in_every_report_file(tmp_path):
    """``PWD`` is no credential: a path below the working directory reads as itself (it read
    ``[redacted]/…`` when ``PWD`` matched the secret-name pattern)."""
    cwd = "/work/projects/my-model-tests"
    run = Run(tmp_path).phase("p", 0, 10)
    run.worker("p").runner(f"{cwd}/tests/t.py::test_a", 1, 2, 3, model=f"{cwd}/models/e5")
    report = run.finalize({"PWD": cwd, "OLDPWD": cwd, "HARNESS_WORKDIR": cwd})
    assert report["environment"] == {"HARNESS_WORKDIR": cwd}
    assert report["records"][0]["model"] == f"{cwd}/models/e5"
    for name in ("report.json", "summary.md", "report.html"):
        text = (tmp_path / name).read_text()
        assert f"{cwd}/models/e5" in html.unescape(text) and REDACTED not in text, name


def _forms(value: str) -> list[str]:
    """``value`` as each file kind would write it."""
    return sorted(
        {
            value,
            html.escape(value),
            html.escape(value, quote=False),
            value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&#34;"),
            json.dumps(value)[1:-1],
            repr(value)[1:-1],
            json.dumps(html.escape(value))[1:-1],
        }
    )


def _leaks(out: Path, values: list[str]) -> list[str]:
    found = []
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        data = path.read_bytes().decode("utf-8", errors="replace")
        found += [f"{path.relative_to(out)}: {form!r}" for v in values for form in _forms(v) if form in data]
    return found


def test_the_ledger_and_pytests_junit_files_are_redacted_too(tmp_path, monkeypatch):
    """What the ledger writer writes (a test id, a runner's config key named like a credential, a
    finding's message, an option's value) and pytest's own per-phase JUnit file with the failure text."""
    monkeypatch.setenv("DB_PASSWORD", PASSWORD)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    run = Run(tmp_path).phase("p", 0, 10)
    writer = LedgerWriter(tmp_path / "ledger" / "p", worker="gw0", args=["--api-key", "k3y<&>"])
    writer.test(f"tests/t.py::test_a[{PASSWORD}]", "failed", 0.0, 0.1, 0.0, f"tests/t.py::test_b[{TOKEN}]")
    writer.write("runner-start", id="gw0-1", kind="hf", model="m", config={"token": "abc", "x": "k3y<&>"})
    writer.write("finding", type="crash", message=f"died with HF_TOKEN={TOKEN} set")
    writer.close()
    junit = tmp_path / "junit"
    junit.mkdir()
    suite = ET.Element("testsuite", name="pytest", tests="1")
    case = ET.SubElement(suite, "testcase", classname="tests.t", name=f"test_a[{PASSWORD}]")
    ET.SubElement(case, "failure", message=f"assert {PASSWORD!r} == 'x'").text = f"E  {TOKEN}"
    ET.ElementTree(suite).write(junit / "p.xml", encoding="utf-8", xml_declaration=True)
    run.finalize({"DB_PASSWORD": PASSWORD, "HF_TOKEN": TOKEN})
    assert _leaks(tmp_path, [PASSWORD, TOKEN, "k3y<&>"]) == []
    assert "abc" not in (tmp_path / "ledger" / "p" / "gw0.jsonl").read_text()  # named: any length
    assert ET.parse(junit / "p.xml").getroot().find("testcase").get("name") == f"test_a[{REDACTED}]"


SUITE = """
[tool.harness.suites.models]
paths = ["tests"]

[[tool.harness.suites.models.phases]]
name = "p"
workers = 2
"""
CONFTEST = """
def pytest_addoption(parser):
    parser.addoption("--hf-token")
    parser.addoption("--api-key")
"""
TESTS = """
import os
import pytest

def test_password():
    assert os.environ["DB_PASSWORD"] == "wrong"

def test_token(request):
    assert request.config.getoption("--hf-token") == "wrong"

def test_key(request):
    print("the key is", request.config.getoption("--api-key"))
    assert 0

@pytest.mark.parametrize("value", [os.environ["DB_PASSWORD"], os.environ["SHORT_TOKEN"]])
def test_param(value):
    assert value == "x"
"""


def test_no_file_of_a_run_directory_carries_a_secret_its_tests_assert_on(tmp_path):
    (tmp_path / "pyproject.toml").write_text(SUITE)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(CONFTEST)
    (tmp_path / "tests" / "test_secret.py").write_text(textwrap.dedent(TESTS))
    key, short = "sk-Key&<1>\"'", "tok4"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "DB_PASSWORD": PASSWORD,
        "SHORT_TOKEN": short,
        "HARNESS_HUB_TOKEN": "q",
    }
    argv = [
        "run",
        "--platform",
        "cpu",
        "--out",
        "out",
        "models",
        "--",
        f"--hf-token={TOKEN}",
        "--api-key",
        key,
    ]
    done = subprocess.run(
        [sys.executable, "-m", "harness", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "out"
    assert (out / "junit" / "p.xml").is_file() and list((out / "ledger" / "p").glob("*.jsonl"))
    leaks = _leaks(out, [PASSWORD, TOKEN, key, short])
    assert leaks == []
    report = json.loads((out / "report.json").read_text())
    assert report["environment"]["HARNESS_HUB_TOKEN"] == REDACTED
    assert f"--hf-token={REDACTED}" in report["phases"][0]["args"]
    assert sorted(t["outcome"] for t in report["tests"]) == ["failed"] * 5
    ET.parse(out / "junit.xml")


def test_a_secret_pytest_cut_short_leaves_no_fragment_in_any_file(tmp_path):
    """pytest shows a long value's repr cut in the middle (``'hf_Lo…ng'``): its start and its end are
    redacted too, wherever text leaves the run."""
    (tmp_path / "pyproject.toml").write_text(SUITE.replace("workers = 2", 'workers = "serial"'))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_long.py").write_text(
        "import os\n\ndef test_long():\n    assert os.environ['HF_TOKEN'] == 'x'\n"
    )
    token = "hf_" + "".join(chr(ord("a") + (i * 7) % 26) for i in range(400))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HF_TOKEN": token,
    }
    argv = [sys.executable, "-m", "harness", "run", "--platform", "cpu", "--out", "out", "models"]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    junit = (tmp_path / "out" / "junit.xml").read_text()
    assert "..." in junit or "…" in junit  # pytest did cut it short
    fragments = {token[i : i + 12] for i in range(0, len(token) - 12)}
    found = [
        f"{path.relative_to(tmp_path)}: {fragment}"
        for path in (tmp_path / "out").rglob("*")
        if path.is_file()
        for fragment in fragments
        if fragment in path.read_text(errors="replace")
    ]
    assert found == []
