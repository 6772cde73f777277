"""Run directories for the report tests, laid out as ``harness run`` and the plugin lay them out.

``phases.json`` and ``ledger/<phase>/<worker>.jsonl`` in the documented event schema, with timestamps
the test chooses, so overlaps and lifetimes are exact. Reading goes through ``harness.ledger.read``.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

from harness.report.finalize import finalize

T0 = 1_750_000_000.0
GIB = 2**30


class Run:
    """A run directory being written: phases and one ledger file per worker and phase."""

    def __init__(self, root: Path, suite: str = "pooling", platform: str = "cpu", reason: str = "forced"):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.meta = {
            "suite": suite,
            "platform": platform,
            "platform_reason": reason,
            "shard": None,
            "started": T0,
            "phases": [],
        }

    def phase(self, name: str, started: float, wall_s: float, exit_code: int = 0, timed_out: bool = False):
        self.meta["phases"].append(
            {
                "name": name,
                "started": T0 + started,
                "wall_s": wall_s,
                "exit_code": exit_code,
                "args": ["-n", "1"],
                "timed_out": timed_out,
            }
        )
        (self.root / "phases.json").write_text(json.dumps(self.meta))
        return self

    def worker(self, phase: str, worker: str = "gw0", devices: tuple[str, ...] = ("cpu",)) -> Worker:
        return Worker(self.root / "ledger" / phase / f"{worker}.jsonl", phase, worker, list(devices))

    def finalize(self, env: dict | None = None) -> dict:
        return finalize(self.root, env=env or {}, publish=False)


class Worker:
    """Writes one worker's events; times are seconds after ``T0``."""

    def __init__(self, path: Path, phase: str, worker: str, devices: list[str]):
        self.path, self.phase, self.name, self.devices = path, phase, worker, devices
        self.count = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self.write("worker", 0.0, worker=worker, devices=devices, mask=",".join(devices), pid=4242)

    def write(self, event: str, t: float, **fields) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"event": event, "t": T0 + t, **fields}) + "\n")

    def runner(
        self,
        test: str,
        start: float,
        startup_s: float,
        stop: float | None = None,
        *,
        kind: str = "vllm",
        model: str = "intfloat/e5-small",
        fingerprint: str = "a1b2c3d4e5f6",
        fixture: str | None = None,
        scope: str = "function",
        outcome: str = "started",
        used: tuple[int, int, int] = (1 * GIB, 9 * GIB, 1 * GIB),
    ) -> str:
        """A runner lifetime: start, then started or failed, then stopped when ``stop`` is given."""
        self.count += 1
        runner = f"{self.name}-{self.count}"
        device = self.devices[0]
        self.write(
            "runner-start",
            start,
            id=runner,
            kind=kind,
            model=model,
            fingerprint=fingerprint,
            config={"model": model},
            test=test,
            file=test.split("::")[0],
            fixture=fixture,
            scope=scope,
            worker=self.name,
            phase=self.phase,
            devices=self.devices,
            need_bytes=None,
            mem_before={device: used[0]},
        )
        if outcome in ("failed", "blocked"):
            self.write(
                "runner-failed",
                start + startup_s,
                id=runner,
                startup_s=startup_s,
                error="ValueError: not enough memory",
                blocked=outcome == "blocked",
                holders=["gw0-1 vllm held by test_a"] if outcome == "blocked" else [],
            )
            return runner
        self.write(
            "runner-started",
            start + startup_s,
            id=runner,
            startup_s=startup_s,
            mem_after_start={device: used[1]},
        )
        if stop is not None:
            self.write("runner-stopped", stop, id=runner, teardown_s=0.5, mem_after_stop={device: used[2]})
        return runner

    def reused(self, runner: str, test: str, t: float, *, fingerprint: str, saved_s: float) -> None:
        """The reuse pool handed ``runner``'s warm engine to ``test``."""
        self.write(
            "runner-reused",
            t,
            runner=runner,
            kind="vllm",
            model="intfloat/e5-small",
            fingerprint=fingerprint,
            test=test,
            file=test.split("::")[0],
            fixture=None,
            scope=None,
            worker=self.name,
            phase=self.phase,
            saved_s=saved_s,
        )

    def refused(self, runner: str, test: str, t: float, reason: str) -> None:
        self.write("reuse-refused", t, runner=runner, fingerprint="f1", model="m", test=test, reason=reason)

    def test(
        self, nodeid: str, outcome: str = "passed", t: float = 0.0, setup_s=0.0, call_s=0.1, teardown_s=0.0
    ):
        self.write(
            "test",
            t,
            nodeid=nodeid,
            file=nodeid.split("::")[0],
            outcome=outcome,
            setup_s=setup_s,
            call_s=call_s,
            teardown_s=teardown_s,
            worker=self.name,
            device=self.devices[0],
            phase=self.phase,
        )

    def finding(self, kind: str, message: str, t: float, **fields) -> None:
        self.write("finding", t, type=kind, message=message, **fields)


def overlap_run(root: Path) -> Run:
    """Two phases; in ``default`` a module-scoped engine is still alive when a later test builds its own
    on the same device (the #52570 shape), a function-scoped HF model on a second worker, and a runner
    that never stopped in ``multi``."""
    run = Run(root).phase("default", 0.0, 200.0).phase("multi", 205.0, 60.0, exit_code=1)
    gw0 = run.worker("default", "gw0", ("GPU-0",))
    gw1 = run.worker("default", "gw1", ("GPU-1",))
    gw0.runner(
        "tests/p/test_a.py::test_one",
        2,
        30,
        150,
        fixture="llm",
        scope="module",
        used=(1 * GIB, 60 * GIB, 1 * GIB),
    )
    gw0.test("tests/p/test_a.py::test_one", t=40, setup_s=31)
    gw0.test("tests/p/test_a.py::test_two", t=42)
    gw0.runner(
        "tests/p/test_a.py::test_three",
        50,
        28,
        90,
        model="BAAI/bge-small",
        used=(60 * GIB, 120 * GIB, 61 * GIB),
    )
    gw0.finding(
        "live-runner-overlap",
        "gw0-2 started while gw0-1 (fixture llm, module) held GPU-0",
        50,
        runner="gw0-2",
    )
    gw0.test("tests/p/test_a.py::test_three", t=90, call_s=40)
    gw1.runner(
        "tests/p/test_b.py::test_hf", 5, 8, 30, kind="hf", model="sentence-transformers/all-MiniLM-L6-v2"
    )
    gw1.test("tests/p/test_b.py::test_hf", t=30, call_s=25)
    multi = run.worker("multi", "gw0", ("GPU-0",))
    multi.runner("tests/p/test_c.py::test_tp", 210, 20, None, model="facebook/opt-125m")
    multi.test("tests/p/test_c.py::test_tp", outcome="failed", t=260, call_s=50)
    return run


def run_suite(pytester, monkeypatch, files: dict[str, str], *args: str, phase: str = "default") -> tuple:
    """A real pytest session (subprocess, harness plugin on) over ``files`` written into a run directory
    the way ``harness run`` lays one out: ledger and pytest's junitxml per phase, and ``phases.json``.
    Needs ``fake_gpus`` set up first; returns (pytest result, run directory)."""
    run_dir = pytester.path / "run"
    for name, source in files.items():
        pytester.makepyfile(**{name: "import pytest\n" + textwrap.dedent(source)})
    monkeypatch.setenv("HARNESS_PHASE", phase)
    started = time.time()
    result = pytester.runpytest_subprocess(
        "--harness",
        "--harness-ledger-dir",
        str(run_dir / "ledger" / phase),
        f"--junitxml={run_dir / 'junit' / f'{phase}.xml'}",
        "-p",
        "no:cacheprovider",
        *args,
    )
    meta = {
        "suite": "pooling",
        "platform": "cuda",
        "platform_reason": "fake NVML",
        "shard": None,
        "started": started,
        "phases": [
            {
                "name": phase,
                "started": started,
                "wall_s": time.time() - started,
                "exit_code": int(result.ret),
                "args": list(args),
                "timed_out": False,
            }
        ],
    }
    (run_dir / "phases.json").write_text(json.dumps(meta))
    return result, run_dir
