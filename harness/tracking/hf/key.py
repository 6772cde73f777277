"""A load's configuration, as the ledger records it and the reuse pool keys it: the call's arguments by
name, the class loaded (and what the harness's runner adds, its device), a local checkpoint's files."""

from __future__ import annotations

from harness.tracking.fingerprints import fingerprint, local_files


def config(found: dict, klass: type, model: object, **extra: object) -> dict:
    """``found`` (a load's arguments, ``fingerprints.normalise``d) with the class ``klass``, ``extra`` and,
    where ``model`` is a local folder, its files (a local checkpoint rewritten is another model)."""
    found["class"] = klass.__name__
    found.update(extra)
    if (files := local_files(model)) is not None:
        found["model_files"] = files
    return found


def reuse_key(config: dict) -> str:
    """The key a load's model is parked and taken by: its configuration's fingerprint, as the ledger's."""
    return fingerprint("hf", config)
