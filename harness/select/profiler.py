"""Recording which files' code ran: a recorder switched between owners (a module's collection, a fixture,
a test, a child process), each owner's files read from its code objects once.

On Python 3.12+ ``sys.monitoring`` notes each code object's first start per owner and is then silent
for it; 3.11 has no ``sys.monitoring``, so there it is ``cProfile``, the profiler written in C (a call
costs no Python frame of ours, but every call costs). Only files under the roots (the rootdir, the
packages the suite names, e.g. ``vllm``) are kept, as ``/``-separated paths relative to their root (a
package's files as ``vllm/...``, which is where they are in the package's own repository).

A process the test starts records too, without a profiler (an engine's busy loop would pay for every
call): ``pytest-gpu-harness.pth`` calls ``child()`` at interpreter start when ``DIRECTORY`` is set (a
spawned process, ``vllm serve``; it loads this file as ``_harness_footprint``, importing no ``harness``
module, so a pytest started there still rewrites the harness's asserts, and this module imports only the
standard library), ``forked`` runs in a forked one. Either writes the files of the modules it imported as
``child-<pid>.json`` into ``DIRECTORY``, under the test that was running (``TEST``), where the session
collects it: at its start and again at each module it imports (an audit hook on ``exec`` of a module's
code and ``import`` of an extension module; whole-or-absent writes), so a process killed at any point
(vLLM SIGKILLs an EngineCore that outlives its 5 s grace after SIGTERM) has written all it imported.
"""

from __future__ import annotations

import _thread
import contextlib
import cProfile
import json
import os
import sys
from collections.abc import Iterable, Mapping

DIRECTORY = "HARNESS_FOOTPRINT_DIR"  # where processes a test starts write their files
TEST = "HARNESS_FOOTPRINT_TEST"  # the test that was running when the process started
ROOTS = "HARNESS_FOOTPRINT_ROOTS"  # os.pathsep-separated "name=path" roots (the rootdir is "")
PACKAGES = ("vllm",)  # default packages whose files count (``[tool.harness.select] packages``)
RECORD = "HARNESS_FOOTPRINTS"  # "1": record (harness run sets it where selection is in use)
PACKAGES_VARIABLE = "HARNESS_FOOTPRINT_PACKAGES"  # harness run's: the suite's packages, comma-separated


def roots(rootdir: str | os.PathLike[str], packages: Iterable[str]) -> dict[str, str]:
    """Root folder -> the prefix its files get: the rootdir's files as they are, a package's under its
    name. A package not installed is left out (found without importing it)."""
    from importlib.util import find_spec

    found = {os.path.realpath(rootdir): ""}
    for name in packages:
        try:
            spec = find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            found.setdefault(os.path.realpath(location), name)
    return found


INSTALLED = ("site-packages", "dist-packages")  # a venv inside the rootdir (nox's .nox/) is not the repo's


class Paths:
    """A code object's file -> its name in footprints (None: outside every root), each file once. The
    rootdir's files leave out installed packages below it (a venv in ``.nox/``: thousands of files per
    test that no change of the repository touches); a package the suite names keeps its own root."""

    def __init__(self, roots: Mapping[str, str]):
        # longest first: a file is named from the nearest root that holds it
        self.roots = sorted(((r.rstrip(os.sep) + os.sep, p) for r, p in roots.items()), key=_shortest)
        self.cache: dict[str, str | None] = {}

    def name(self, filename: str) -> str | None:
        if filename in self.cache:
            return self.cache[filename]
        found = None
        if not filename.startswith("<"):
            real = os.path.realpath(filename)
            for root, prefix in self.roots:
                if real.startswith(root):
                    rest = real[len(root) :].replace(os.sep, "/")
                    if prefix:
                        found = f"{prefix}/{rest}"
                    elif not _installed(rest):
                        found = rest
                    break
        self.cache[filename] = found
        return found


def _installed(rest: str) -> bool:
    return any(part in INSTALLED for part in rest.split("/")[:-1])


def _shortest(item: tuple[str, str]) -> int:
    return -len(item[0])


class Recorder:
    """One process's recorder: ``switch(owner)`` files what ran since the last switch under the previous
    owner and records for the new one (None: records nothing). ``recorder(paths)`` makes the one this
    Python has: ``Monitor`` (``sys.monitoring``, 3.12+) or ``Profile`` (``cProfile``, 3.11)."""

    def __init__(self, paths: Paths):
        self.paths = paths
        self.owner: str | None = None
        self.files: dict[str, set[str]] = {}
        self.complete = True  # False once an owner could not record (its files would be too few)

    def switch(self, owner: str | None) -> str | None:
        """Start recording for ``owner``; returns the previous owner."""
        previous = self.owner
        if previous is not None:
            found = {self.paths.name(f) for f in self._stop()}
            self.files.setdefault(previous, set()).update(found - {None})  # type: ignore[arg-type]
        self.owner = owner
        if owner is not None:
            self._start()
        return previous

    def take(self, owner: str) -> set[str]:
        """The files recorded for ``owner`` so far, forgotten here."""
        return self.files.pop(owner, set())

    def _start(self) -> None:
        raise NotImplementedError

    def _stop(self) -> set[str]:
        """Stops recording; the code objects' file names seen since ``_start``."""
        raise NotImplementedError


class Profile(Recorder):
    """Python 3.11: ``cProfile`` (C, so a call costs no Python frame of ours, but each call costs), read
    once per owner; only the test's own thread is profiled."""

    def __init__(self, paths: Paths):
        super().__init__(paths)
        self.profile = cProfile.Profile()

    def _start(self) -> None:
        self.profile.enable(subcalls=False, builtins=False)

    def _stop(self) -> set[str]:
        self.profile.disable()
        entries = self.profile.getstats()  # builtins have no code object, so no file
        self.profile.clear()
        return {e.code.co_filename for e in entries if hasattr(e.code, "co_filename")}


class Monitor(Recorder):
    """Python 3.12+: ``sys.monitoring`` under a tool id of its own, PY_START only; a code object's first
    start is noted and then disabled (``DISABLE``), so it costs once per owner, not per call;
    ``restart_events()`` at each switch lets the next owner see it again. It sees every thread (a
    footprint wider, never narrower). The tool id is held only while an owner records."""

    TOOL_IDS = (3, 4)  # 0-2 and 5 are sys.monitoring's debugger, coverage, profiler and optimizer ids

    def __init__(self, paths: Paths):
        super().__init__(paths)
        self.seen: set[str] = set()
        self.tool: int | None = None

    def _start(self) -> None:
        monitoring = sys.monitoring  # type: ignore[attr-defined]
        self.tool = next((i for i in self.TOOL_IDS if monitoring.get_tool(i) is None), None)
        if self.tool is None:  # both taken by other tools: this owner's files are unknown
            self.complete = False
            return
        monitoring.use_tool_id(self.tool, "harness footprints")
        add, disable = self.seen.add, monitoring.DISABLE

        def started(code, offset: int):  # noqa: ANN202 (sys.monitoring's PY_START callback)
            add(code.co_filename)
            return disable

        monitoring.register_callback(self.tool, monitoring.events.PY_START, started)
        monitoring.restart_events()
        monitoring.set_events(self.tool, monitoring.events.PY_START)

    def _stop(self) -> set[str]:
        monitoring = sys.monitoring  # type: ignore[attr-defined]
        if self.tool is not None:
            monitoring.set_events(self.tool, 0)
            monitoring.register_callback(self.tool, monitoring.events.PY_START, None)
            monitoring.free_tool_id(self.tool)
            self.tool = None
        seen, self.seen = self.seen, set()
        return seen


def recorder(paths: Paths) -> Recorder:
    """This Python's recorder, chosen by version."""
    return Monitor(paths) if sys.version_info >= (3, 12) else Profile(paths)


_CHILD: Record | None = None
_HOOKED = False  # the audit hook is in this process (a forked child inherits it)
_PROBE = "harness.footprint.hooked"  # the event that tells the hook it was added


class Record:
    """A child process's files as it imports them: ``child-<pid>.json`` written whole at its start and again
    at each new file, so a child killed at any point (vLLM SIGKILLs an engine process still alive 5 s
    after its SIGTERM) has written every module it imported until then. Each file whose code the child
    ran is among them (a function runs from a module that was imported), at no cost per call; a module
    imported but not run makes it wider, so selection errs towards running."""

    def __init__(self, paths: Paths, directory: str, test: str):
        self.paths, self.directory, self.test = paths, directory, test
        self.files: dict[str, str] = {}  # name -> its JSON, in the order first seen (each write joins them)
        self.pid, self.lock = os.getpid(), _thread.allocate_lock()
        self.broken = False

    def saw(self, filenames: Iterable[str]) -> None:
        """Adds these code files; writes the record when one of them is new."""
        new = [n for n in map(self.paths.name, filenames) if n is not None and n not in self.files]
        if not new or self.broken:
            return
        if self.pid != os.getpid():  # a forked child: its own file, and no lock held by a parent's thread
            self.pid, self.lock = os.getpid(), _thread.allocate_lock()
        with self.lock:
            self.files.update((name, json.dumps(name)) for name in new)
            self.write()

    def write(self) -> None:
        text = f'{{"test": {json.dumps(self.test)}, "files": [{", ".join(self.files.values())}]}}'
        _put(self.directory, f"child-{os.getpid()}", text)

    def spoil(self) -> None:
        """Recording failed: no file of this child, so its test counts as unknown (``begun-`` alone)."""
        self.broken = True
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.directory, f"child-{os.getpid()}.json"))


def _audit(event: str, args: tuple) -> None:
    """``sys.addaudithook``'s hook: a module's body is about to run (``exec`` of its code) or an extension
    module was loaded (``import`` with its file). Any other event returns at once."""
    if event == "exec":
        filename = getattr(args[0], "co_filename", None)
    elif event == "import":
        filename = args[1]
    else:
        if event == _PROBE:  # the hook is in (sys.addaudithook drops one an earlier hook refuses, silently)
            global _HOOKED
            _HOOKED = True
        return
    record = _CHILD
    if record is not None and isinstance(filename, str):
        try:
            record.saw((filename,))
        except Exception:  # an exception here would break the child's import
            record.spoil()


def child(env: Mapping[str, str] = os.environ) -> None:
    """In a process a test started (``DIRECTORY`` set): its files are written as it imports them."""
    if _CHILD is None and env.get(DIRECTORY) and env.get(TEST):
        _follow(Record(Paths(dict(_parse(env.get(ROOTS, "")))), env[DIRECTORY], env[TEST]))


def forked(recorder: Recorder, directory: str, test: str | None) -> None:
    """In a forked child of a recording process: its copy of the profiler stops (an engine's busy loop
    would pay for each call); its files are written as it imports them, as the running test's (``test``;
    none: nothing is recorded)."""
    recorder.switch(None)
    recorder.files = {}
    if test:
        _follow(Record(recorder.paths, directory, test))


def _follow(record: Record) -> None:
    """``begun-<pid>.json``, then the record of what was imported so far, then one more file at each new
    module (the audit hook) and at exit. Where the hook cannot be added (another hook refuses it), the
    record is written at exit only: a child killed first leaves ``begun-`` alone, and its test is unknown,
    never narrower than what it ran."""
    global _CHILD
    _CHILD = record
    try:
        os.makedirs(record.directory, exist_ok=True)
    except OSError:  # written nowhere: its test stays unknown
        return
    _put(record.directory, f"begun-{os.getpid()}", json.dumps({"test": record.test}))
    if not _HOOKED:
        try:
            sys.addaudithook(_audit)
            sys.audit(_PROBE)
        except Exception:  # noqa: S110 (an earlier hook raised: written at exit only)
            pass
    if _HOOKED:  # after the hook is in: no module is imported unseen between the two
        record.saw(_imported())
        record.write()
    import atexit

    atexit.register(_write)
    if "multiprocessing" in sys.modules:  # a multiprocessing child leaves by os._exit, after its finalizers
        from multiprocessing import util

        util.Finalize(None, _write, exitpriority=100)
        # a forked one first clears the finalizers it inherited, then runs its after-fork hooks
        util.register_after_fork(record, lambda _: util.Finalize(None, _write, exitpriority=100))


def _imported() -> list[str]:
    """The files of every module this process has imported."""
    return [f for f in (getattr(m, "__file__", None) for m in list(sys.modules.values())) if f]


def _write() -> None:
    """The child's files at its finalizers or at exit: what the hook saw and every module imported (one
    loaded unseen, or all of them where no hook could be added)."""
    record = _CHILD
    if record is None or record.broken:
        return
    before = len(record.files)
    record.saw(_imported())
    if not _HOOKED and len(record.files) == before:  # saw() wrote nothing: the only write
        record.write()


def _put(directory: str, name: str, text: str) -> None:
    """``name``.json, whole or absent, never cut short: a part-written file would read as less. Plain
    system calls: a child writes at each new module."""
    part = os.path.join(directory, f"{name}.part")
    try:
        out = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            left = memoryview(text.encode())
            while left:
                left = left[os.write(out, left) :]
        finally:
            os.close(out)
        os.replace(part, os.path.join(directory, f"{name}.json"))
    except OSError:  # the run directory is gone (the session ended first): nothing to add to
        pass


def export(roots: Mapping[str, str]) -> str:
    """``ROOTS``' value for child processes."""
    return os.pathsep.join(f"{prefix}={root}" for root, prefix in roots.items())


def _parse(value: str) -> Iterable[tuple[str, str]]:
    for part in value.split(os.pathsep):
        prefix, _, root = part.partition("=")
        if root:
            yield root, prefix
