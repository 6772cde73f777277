"""The one process context: found from pytest's rootdir, swapped and restored, safe across threads."""

from __future__ import annotations

import threading

from harness.config.settings import load_settings
from harness.ledger.owner import Owner
from harness.memory.admission import Holder, Holders
from harness.platform.host import HostPlatform
from harness.tracking import context

OWNER = Owner(None, None, None, None, "main", None)
pytest_plugins = ["pytester"]


def test_inside_pytest_the_rootdir_decides_not_the_current_directory(pytester, monkeypatch):
    project = pytester.mkdir("project")
    (project / "pyproject.toml").write_text("[tool.harness]\ntest_timeout_s = 123.0\n")
    (project / "test_here.py").write_text(
        "from harness.tracking import context\n"
        "def test_settings(request):\n"
        "    assert context.current().settings.test_timeout_s == 123.0\n"
        "    assert request.config.getoption('timeout') == 123.0\n"
    )
    elsewhere = pytester.mkdir("elsewhere")
    (elsewhere / "pyproject.toml").write_text("[tool.harness]\ntest_timeout_s = 7.0\n")
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    result = pytester.runpytest_subprocess(
        str(project / "test_here.py"), f"--rootdir={project}", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)


def test_use_swaps_and_returns_the_replaced_context():
    mine = context.Context(HostPlatform(), load_settings("cpu", None, env={}))
    replaced = context.use(mine)
    try:
        assert context.current() is mine
    finally:
        assert context.use(replaced) is mine


def test_holders_and_stopped_runs_survive_concurrent_threads():
    here = context.Context(HostPlatform(), load_settings("cpu", None, env={}))
    holders: Holders = here.holders

    def churn(worker: int) -> None:
        for i in range(2000):
            holders.hold(Holder((worker, i), "x", OWNER, (0,), {0: 1}))
            here.stopped((worker, i))
            assert holders.release((worker, i)) is not None

    threads = [threading.Thread(target=churn, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    taken = []
    while any(t.is_alive() for t in threads):
        taken += here.take_stopped()
        holders.on()
    for thread in threads:
        thread.join()
    taken += here.take_stopped()
    assert holders.on() == []
    assert sorted(taken) == sorted((w, i) for w in range(8) for i in range(2000))
