"""summary.md: content, the size cap, and where CI gets it (step summary, buildkite-agent annotate)."""

from __future__ import annotations

import json
import os
import re
import stat

from harness.report import html
from harness.report.publish import publish
from harness.report.summary import render
from tests.unit.report_runs import Run, overlap_run


def test_summary_has_phases_starts_slowest_findings_and_advice(tmp_path):
    run = overlap_run(tmp_path)
    worker = run.worker("multi", "gw1", ("GPU-1",))
    worker.runner("tests/p/test_d.py::test_x", 210, 9, 220, kind="hf", model="m")
    worker.runner("tests/p/test_d.py::test_y", 221, 7, 230, kind="hf", model="m")
    text = render(run.finalize())
    lines = text.splitlines()
    assert lines[0] == "# harness: pooling on cpu"
    assert "| default | 0 | 200.0 s | 4 | 0 | 0 | 0 | 2 | 1 |" in lines
    assert "| multi | 1 | 60.0 s | 0 | 1 | 0 | 0 | 1 | 2 |" in lines
    assert "6 starts, 102.0 s starting up." in lines
    assert "| vllm | 4 | 0 | 98.0 s |" not in lines and "| vllm | 3 | 0 | 78.0 s |" in lines
    assert "| `tests/p/test_a.py` | 2 | 0 | 58.0 s | 71.2 s |" in lines
    slowest = lines.index("### Slowest starts")
    assert lines[slowest + 4].startswith("| 30.0 s | vllm | `intfloat/e5-small` | `llm` | gw0 | started |")
    assert any(line.startswith("- **live-runner-overlap**: gw0-2 started while gw0-1") for line in lines)
    assert any(line.startswith("- **never-stopped**: vllm runner facebook/opt-125m") for line in lines)
    advice = next(line for line in lines if line.startswith("- hf `m` started 2×"))
    assert "one module-scoped fixture for module `tests/p/test_d.py` would save 7.0 s" in advice


def test_empty_run_says_so(tmp_path):
    text = render(Run(tmp_path).phase("default", 0, 1).finalize())
    assert "0 starts, 0.0 s starting up." in text
    assert "## Findings\n\nNone." in text
    assert "Every runner configuration started once per file and worker." in text


def test_long_tables_are_cut_with_a_note(tmp_path):
    run = Run(tmp_path).phase("default", 0, 500)
    worker = run.worker("default")
    for n in range(50):
        worker.runner(f"tests/t{n:02}.py::test_a", n * 2, 1, n * 2 + 1.5)
    text = render(run.finalize(), rows=40)
    assert "_10 more rows in report.json_" in text
    assert "tests/t39.py" in text or "tests/t10.py" in text
    assert sum(line.startswith("| `tests/t") for line in text.splitlines()) == 40


def test_summary_stays_under_the_byte_limit(tmp_path):
    run = Run(tmp_path).phase("default", 0, 500)
    worker = run.worker("default")
    for n in range(30):
        worker.finding("memory-not-released", "ü" * 5000 + f" {n}", n)
    report = run.finalize()
    assert len(render(report).encode()) > 100_000
    text = render(report, limit=100_000)
    assert len(text.encode()) <= 100_000
    assert text.endswith("_Summary cut to stay under the size limit; report.json has everything._\n")


def test_step_summary_is_appended(tmp_path):
    report = overlap_run(tmp_path / "run").finalize()
    step = tmp_path / "step.md"
    step.write_text("earlier step\n")
    publish("# summary\n", report, {"GITHUB_STEP_SUMMARY": str(step), "PATH": ""})
    assert step.read_text() == "earlier step\n# summary\n\n"


def _fake_agent(directory, exit_code=0):
    """A ``buildkite-agent`` on PATH that records its arguments and stdin, as the real one reads them."""
    directory.mkdir()
    script = directory / "buildkite-agent"
    script.write_text(
        "#!/bin/sh\n"
        f'python3 -c \'import json, sys; json.dump({{"argv": sys.argv[1:], "stdin": sys.stdin.read()}}, '
        f'open("{directory}/call.json", "w"))\' "$@"\n'
        f'echo "fatal: agent said no" >&2\nexit {exit_code}\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return directory / "call.json"


def test_buildkite_annotation_gets_the_summary_on_stdin(tmp_path):
    report = overlap_run(tmp_path / "run").finalize()
    call = _fake_agent(tmp_path / "bin")
    path = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    publish("# summary\n", report, {"BUILDKITE": "true", "PATH": path})
    recorded = json.loads(call.read_text())
    assert recorded == {
        "argv": ["annotate", "--style", "error", "--context", "harness-pooling-cpu"],
        "stdin": "# summary\n",
    }


def test_no_annotation_outside_buildkite(tmp_path):
    report = overlap_run(tmp_path / "run").finalize()
    call = _fake_agent(tmp_path / "bin")
    publish("# summary\n", report, {"PATH": str(tmp_path / "bin")})
    assert not call.exists()


def test_annotation_style_follows_exit_codes_and_findings(tmp_path):
    clean = Run(tmp_path / "clean").phase("default", 0, 1)
    clean.worker("default").test("tests/t.py::test_a")
    warned = Run(tmp_path / "warned", suite="generation").phase("default", 0, 1)
    warned.worker("default").finding("timeout", "test_a timed out", 1, test="tests/t.py::test_a")
    call = _fake_agent(tmp_path / "bin")
    for run, style, context in (
        (clean, "success", "harness-pooling-cpu"),
        (warned, "warning", "harness-generation-cpu"),
    ):
        run.meta["shard"] = "1/4"
        run.phase("again", 1, 1, exit_code=5)  # no tests collected is not a failure
        publish("x", run.finalize(), {"BUILDKITE": "true", "PATH": str(tmp_path / "bin")})
        assert json.loads(call.read_text())["argv"][1:] == ["--style", style, "--context", f"{context}-1of4"]


def test_a_failing_agent_is_a_warning_not_a_failure(tmp_path, capsys):
    report = overlap_run(tmp_path / "run").finalize()
    _fake_agent(tmp_path / "bin", exit_code=3)
    publish("x", report, {"BUILDKITE": "true", "PATH": str(tmp_path / "bin")})
    assert (
        capsys.readouterr().err
        == "harness: warning: buildkite-agent annotate exited 3: fatal: agent said no\n"
    )


def test_a_crashed_tests_markup_is_text_in_the_summary(tmp_path):
    """The crash line names the test: its ``<script>`` is text in summary.md (Buildkite renders HTML)."""
    run = Run(tmp_path).phase("default", 0, 10)
    worker = run.worker("default")
    nodeid = "tests/t.py::test_x[<script>alert(1)</script>]"
    worker.write("test-start", 1, nodeid=nodeid)  # started, never finished: the worker died in it
    report = run.finalize()
    text = render(report)
    assert "<script>" not in re.sub(r"`[^`\n]*`", "", text)  # in a code span it is text (CommonMark)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<script>" not in html.page(report, "", text)  # as the page renders it
