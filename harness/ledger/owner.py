"""The owner stamped on a ledger record: which test, fixture and worker a runner or a held memory belongs
to, and how long that lets it live."""

from __future__ import annotations

from typing import Any, NamedTuple


class Owner(NamedTuple):
    """The attribution stamped on a runner start or a fixture that holds memory."""

    test: str | None
    file: str | None
    fixture: str | None
    scope: str | None
    worker: str
    phase: str | None

    def fields(self) -> dict[str, Any]:
        """The owner as a ledger event's fields."""
        return self._asdict()

    def lifetime(self) -> str:
        """How long something created under this owner lives, and what would free it earlier."""
        if self.fixture is None:
            return f"created in the body of {self.test}; closing it before the test ends frees it"
        where = {
            "session": "lives until the end of the session",
            "package": f"lives until the end of the package of {self.file}",
            "module": f"lives until the end of {self.file}",
            "class": f"lives until the end of the class of {self.test}",
            "function": f"lives until the end of {self.test}",
        }.get(self.scope or "", f"lives as long as its {self.scope} scope")
        remedy = (
            "an explicit close before this test frees it"
            if self.scope in ("function", "class")
            else "class scope or an explicit close before this test frees it"
        )
        return f"fixture `{self.fixture}` is {self.scope}-scoped and {where}; {remedy}"
