"""Who owns a runner: the innermost fixture in setup, else the test body; and what would free it."""

from __future__ import annotations

import pytest

from harness.ledger.owner import Owner
from harness.tracking import context
from harness.tracking.attribution import Attribution


def test_innermost_fixture_owns_then_the_test_body(monkeypatch):
    attribution = Attribution("gw1")
    monkeypatch.setenv("HARNESS_PHASE", "pooling")
    attribution.enter_test("t.py::test_x", "t.py")
    attribution.enter_fixture("outer", "module")
    attribution.enter_fixture("inner", "function")
    assert attribution.current() == Owner("t.py::test_x", "t.py", "inner", "function", "gw1", "pooling")
    attribution.leave_fixture()
    assert (attribution.current().fixture, attribution.current().scope) == ("outer", "module")
    attribution.leave_fixture()
    assert attribution.current().fixture is None


def test_the_plugin_attributes_to_the_running_test(request):
    owner = context.current().owner.current()
    assert (owner.test, owner.file, owner.fixture) == (
        request.node.nodeid,
        "tests/unit/test_attribution.py",
        None,
    )


def test_outside_any_test_nothing_is_named():
    owner = Attribution().current()
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
    owner = Owner("tests/m.py::T::t", "tests/m.py", "colbert_model", scope, "main", None)
    assert owner.lifetime().startswith(f"fixture `colbert_model` {says}")


def test_a_runner_built_in_the_test_body_is_freed_by_closing_it():
    owner = Owner("t.py::x", "t.py", None, None, "main", None)
    assert owner.lifetime() == "created in the body of t.py::x; closing it before the test ends frees it"
