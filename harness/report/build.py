"""The run report: ``report.json`` (versioned, written atomically) and the files derived from it.

``finalize(run_dir)`` is the one place that reads a run directory (``phases.json``, ``ledger/``,
``junit/``) and writes ``report.json``, ``junit.xml``, ``summary.md``, ``timeline.svg`` and
``report.html``; the other report modules only turn the report dict into text, so every file is
written the same crash-safe way. ``load(path)`` is how ``harness compare`` and sharding read a report
back. The format is documented in docs/report-format.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform as host
import re
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

from harness import advisor, junit, summary, timeline
from harness.errors import HarnessError, ReportError
from harness.ledger import read as read_ledger
from harness.ledger import started
from harness.packages import installed

VERSION = 1

# Fields ``load`` insists on; ``compare`` and ``shards`` read nothing else without a default.
REQUIRED = {
    "suite": (str, type(None)),
    "phases": list,
    "tests": list,
    "records": list,
    "starts": dict,
    "files": dict,
}

# The environment is copied by allow-list only: device masks, platform and harness settings.
ENV_NAMES = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "VLLM_TARGET_DEVICE",
        "VLLM_CPU_KVCACHE_SPACE",
        "VLLM_CPU_OMP_THREADS_BIND",
        "OMP_NUM_THREADS",
        "HF_HUB_OFFLINE",
        "PYTEST_XDIST_AUTO_NUM_WORKERS",
        "BUILDKITE_PARALLEL_JOB",
        "BUILDKITE_PARALLEL_JOB_COUNT",
    }
)
ENV_PREFIXES = ("HARNESS_",)
# Even an allow-listed prefix never carries something that looks like a credential.
SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|AUTH", re.IGNORECASE)


def finalize(run_dir: Path, env: Mapping[str, str] | None = None, publish: bool = True) -> dict:
    """Write every report file of ``run_dir`` and return the report.

    ``publish`` appends the summary to ``$GITHUB_STEP_SUMMARY`` and annotates the Buildkite build when
    the environment says we run there.
    """
    env = os.environ if env is None else env
    run_dir = Path(run_dir)
    report = build(run_dir, env)
    text = summary.render(report)
    svg = timeline.svg(report)
    write_atomic(run_dir / "report.json", json.dumps(report, indent=1, sort_keys=False) + "\n")
    write_atomic(run_dir / "junit.xml", junit.merge(run_dir / "junit", report["records"]))
    write_atomic(run_dir / "summary.md", text)
    write_atomic(run_dir / "timeline.svg", svg)
    write_atomic(run_dir / "report.html", timeline.html(report, svg, text))
    if publish:
        summary.publish(text, report, env)
    return report


def main(args: argparse.Namespace) -> int:
    """``harness report DIR``: (re)write the report files of a run directory, e.g. after a killed run."""
    run_dir = Path(args.run_dir)
    report = finalize(run_dir)
    total = report["starts"]["total"]
    print(
        f"{run_dir / 'report.json'}: {len(report['tests'])} tests, {total['starts']} runner starts "
        f"({total['startup_s']:.1f} s), {len(report['findings'])} findings"
    )
    return 0


def build(run_dir: Path, env: Mapping[str, str]) -> dict:
    """The report dict of a run directory, read from ``phases.json`` and the per-phase ledgers."""
    meta = _phases_file(run_dir)
    ledger_root = run_dir / "ledger"
    names = [phase["name"] for phase in meta["phases"]]
    if ledger_root.is_dir():
        names += sorted(p.name for p in ledger_root.iterdir() if p.is_dir() and p.name not in names)
    if not names and not (run_dir / "phases.json").exists():
        raise ReportError(f"{run_dir} is not a run directory (no phases.json, no ledger/)")

    records, findings, tests, workers, samples = [], [], [], [], []
    for name in names:
        directory = ledger_root / name
        if not directory.is_dir():
            continue
        ledger = read_ledger(directory)
        # A plain pytest run has no HARNESS_PHASE; the directory names the phase then.
        for item in (*ledger.records, *ledger.tests, *ledger.workers, *ledger.findings):
            if item.get("phase") is None:
                item["phase"] = name
        records += ledger.records
        findings += ledger.findings
        tests += ledger.tests
        workers += ledger.workers
        samples += ledger.samples

    by_phase = {phase["name"]: phase for phase in meta["phases"]}
    for phase in meta["phases"]:
        if phase.get("timed_out"):
            findings.append(
                {
                    "type": "timeout",
                    "t": phase["started"] + phase["wall_s"],
                    "phase": phase["name"],
                    "message": f"phase {phase['name']} ran past its timeout ({phase['wall_s']:.0f} s) "
                    "and was stopped; its remaining tests did not run",
                }
            )
    phases = []
    for name in names:
        phase = dict(by_phase.get(name, {"name": name, "started": None, "wall_s": None, "exit_code": None}))
        phase["outcomes"] = dict(Counter(t["outcome"] for t in tests if t["phase"] == name))
        phases.append(phase)

    return {
        "version": VERSION,
        "generated": time.time(),
        "suite": meta.get("suite"),
        "shard": meta.get("shard"),
        "started": meta.get("started"),
        "platform": {"name": meta.get("platform"), "reason": meta.get("platform_reason")},
        "devices": devices(meta.get("platform"), records, workers, env),
        "versions": versions(Path.cwd()),
        "environment": environment(env),
        "phases": phases,
        "tests": tests,
        "records": records,
        "findings": findings,
        "workers": workers,
        "samples": sorted(samples, key=lambda sample: sample["t"]),
        "starts": starts(records),
        "files": files(tests),
        "advice": advisor.advise(records),
    }


def _phases_file(run_dir: Path) -> dict:
    """``phases.json``, or an empty skeleton when a run was killed before its first phase ended."""
    path = run_dir / "phases.json"
    if not path.exists():
        return {"phases": []}
    data = _json_object(path, "phases file")
    if not isinstance(data.get("phases"), list):
        raise ReportError(f"{path}: field 'phases' is missing or not a list")
    return data


def starts(records: Iterable[dict]) -> dict:
    """Runner starts counted and timed by kind, by phase and by file: what the reuse work is judged by."""

    def tally(group: list[dict]) -> dict:
        return {
            "starts": len(started(group)),
            "failed": len(group) - len(started(group)),
            "startup_s": round(sum(r.get("startup_s") or 0.0 for r in group), 3),
            "by_kind": dict(Counter(r["kind"] for r in started(group))),
        }

    records = list(records)

    def grouped(key: str) -> dict:
        keys = sorted({r[key] for r in records}, key=str)
        return {k: tally([r for r in records if r[key] == k]) for k in keys}

    return {
        "total": tally(records),
        "by_kind": grouped("kind"),
        "by_phase": grouped("phase"),
        "by_file": grouped("file"),
    }


def files(tests: Iterable[dict]) -> dict:
    """Per test file: outcome counts and wall seconds (setup+call+teardown, so runner starts included)."""
    result: dict[str, dict] = {}
    for test in tests:
        entry = result.setdefault(test["file"], {"tests": 0, "outcomes": {}, "wall_s": 0.0})
        entry["tests"] += 1
        entry["outcomes"][test["outcome"]] = entry["outcomes"].get(test["outcome"], 0) + 1
        seconds = sum(test.get(k) or 0.0 for k in ("setup_s", "call_s", "teardown_s"))
        entry["wall_s"] = round(entry["wall_s"] + seconds, 3)
    return dict(sorted(result.items()))


def devices(platform_name: str | None, records: list[dict], workers: list[dict], env: Mapping) -> list[dict]:
    """The devices the run used (by UUID from the ledger), with name and total from the platform.

    A UUID the platform no longer shows (``harness report`` on another machine) keeps a null name and
    total rather than being dropped.
    """
    used = {u for w in workers for u in w.get("devices") or []} | {
        u for r in records for u in r.get("devices") or []
    }
    known: list[dict] = []
    if platform_name:
        from harness.platform import detect

        try:
            found = detect({**env, "HARNESS_PLATFORM": platform_name}).platform.devices()
        except HarnessError:
            found = []
        known = [
            {"index": d.index, "name": d.name, "uuid": d.uuid, "total_bytes": d.total_bytes} for d in found
        ]
    if used:
        known = [d for d in known if d["uuid"] in used]
    missing = sorted(used - {d["uuid"] for d in known})
    return known + [{"index": None, "name": None, "uuid": u, "total_bytes": None} for u in missing]


def versions(tree: Path) -> dict:
    """Versions from package metadata (never importing torch or vllm) and the tested tree's commit."""
    found: dict = {"python": host.python_version()}
    for label, provided in installed(("harness", "torch", "vllm", "transformers")).items():
        found[label] = provided and provided[0]
    try:
        git = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True, timeout=10, check=False
        )
        found["git_commit"] = git.stdout.strip() if git.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        found["git_commit"] = None
    return found


def environment(env: Mapping[str, str]) -> dict:
    """The allow-listed variables only; never the whole environment."""
    return {
        name: env[name]
        for name in sorted(env)
        if (name in ENV_NAMES or name.startswith(ENV_PREFIXES)) and not SECRET.search(name)
    }


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file in the same directory and ``os.replace``: a kill leaves old or new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide CI artifacts from other users
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load(path: str | Path) -> dict:
    """A report from a ``report.json`` or a run directory; any flaw is one ``ReportError`` line."""
    path = Path(path)
    if path.is_dir():
        if not (path / "report.json").is_file():
            raise ReportError(f"{path} is a directory without report.json (run 'harness report {path}')")
        path = path / "report.json"
    report = _json_object(path, "report")
    if "version" not in report:
        raise ReportError(f"{path}: no 'version' field, not a harness report")
    if report["version"] != VERSION:
        raise ReportError(
            f"{path}: report format version {report['version']!r}, this harness reads {VERSION}"
        )
    for field, kind in REQUIRED.items():
        if field not in report:
            raise ReportError(f"{path}: report has no '{field}' field")
        if not isinstance(report[field], kind):
            raise ReportError(f"{path}: report field '{field}' has the wrong type")
    if not all(isinstance(phase, dict) and isinstance(phase.get("name"), str) for phase in report["phases"]):
        raise ReportError(f"{path}: a phase in the report has no name")
    return report


def _json_object(path: Path, what: str) -> dict:
    """A JSON object from ``path``, telling missing, empty, truncated, non-JSON and non-object apart."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportError(f"{path}: no such {what} file") from None
    except UnicodeDecodeError:
        raise ReportError(f"{path}: not a JSON {what} (not UTF-8 text)") from None
    except OSError as error:
        raise ReportError(f"{path}: cannot read {what}: {error.strerror}") from None
    if not text.strip():
        raise ReportError(f"{path}: empty {what} file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        if error.pos >= len(text.rstrip()) or error.msg.startswith("Unterminated string"):
            size = len(text.encode("utf-8"))
            raise ReportError(f"{path}: truncated {what} (JSON ends early, after {size} bytes)") from None
        raise ReportError(
            f"{path}: not a JSON {what} ({error.msg} at line {error.lineno} column {error.colno})"
        ) from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: not a {what} (JSON {type(data).__name__}, expected an object)")
    return data
