"""Who owns a runner: the innermost fixture in setup, else the test body; and what would free it."""

from __future__ import annotations

import pytest

from harness.tracking import attribution


@pytest.fixture
def clean():
    worker = attribution.current().worker  # this session's own, set by the plugin
    yield
    attribution.leave_test()
    attribution.set_worker(worker)


def test_innermost_fixture_owns_then_the_test_body(clean, monkeypatch):
    attribution.set_worker("gw1")
    monkeypatch.setenv("HARNESS_PHASE", "pooling")
    attribution.enter_test("t.py::test_x", "t.py")
    attribution.enter_fixture("outer", "module")
    attribution.enter_fixture("inner", "function")
    assert attribution.current() == attribution.Owner(
        "t.py::test_x", "t.py", "inner", "function", "gw1", "pooling"
    )
    attribution.leave_fixture()
    assert (attribution.current().fixture, attribution.current().scope) == ("outer", "module")
    attribution.leave_fixture()
    assert attribution.current().fixture is None


def test_the_plugin_attributes_to_the_running_test(request):
    owner = attribution.current()
    assert (owner.test, owner.file, owner.fixture) == (
        request.node.nodeid,
        "tests/unit/test_attribution.py",
        None,
    )


def test_outside_any_test_nothing_is_named(clean):
    attribution.leave_test()
    owner = attribution.current()
    assert (owner.test, owner.file, owner.fixture) == (None, None, None)


@pytest.mark.parametrize(
    "scope, says",
    [
        (
            "module",
            "is module-scoped and lives until the end of tests/m.py; class scope or an explicit close",
        ),
        ("session", "is session-scoped and lives until the end of the session; class scope or"),
        ("class", "is class-scoped and lives until the end of the class of tests/m.py::T::t; an explicit"),
        ("function", "is function-scoped and lives until the end of tests/m.py::T::t; an explicit close"),
    ],
)
def test_lifetime_says_what_would_free_it(scope, says):
    owner = attribution.Owner("tests/m.py::T::t", "tests/m.py", "colbert_model", scope, "main", None)
    assert owner.lifetime().startswith(f"fixture `colbert_model` {says}")


def test_a_runner_built_in_the_test_body_is_freed_by_closing_it():
    owner = attribution.Owner("t.py::x", "t.py", None, None, "main", None)
    assert owner.lifetime() == "created in the body of t.py::x; closing it before the test ends frees it"
