"""Threads a test left running, and which runner one can still reach (issue 58, the reuse residue).

A test's thread or timer that sends a request later would send it to an engine handed to the next test:
that test's first try fails, a replay on the same engine passes, and the failure is reported as its own.
So the pool parks no engine such a thread can reach. The answer is read from what the threads hold when
it is asked (the object graph), never from how long they take: a thread still alive, or a timer not
cancelled and not fired, that started during a test (or was left by an earlier one) and holds the engine,
its closure, its arguments or its running frames' variables, counts; a runner's own threads (started while
it starts) and the harness's (``harness-*``) do not.

What a thread reaches is followed through containers and objects, through a function's closure, defaults
and the globals its code names, and through running frames; never into modules, classes or other threads
(from there everything is reachable: threading's own table holds every thread). A thread that holds
pytest's own objects (a test's ``request``) reaches every runner: it is counted against all of them.
"""

from __future__ import annotations

import gc
import sys
import threading
import types
import weakref
from collections.abc import Iterable

_runners: weakref.WeakSet[threading.Thread] = weakref.WeakSet()  # threads started while a runner started
HARNESS = "harness-"  # the name prefix of the harness's own threads
_OPAQUE = (type, types.ModuleType, types.CodeType, types.BuiltinFunctionType, types.FrameType)


def runners_started(threads: Iterable[threading.Thread]) -> None:
    """``threads`` started while a runner started: its own (vLLM's output and monitor threads)."""
    _runners.update(threads)


def running(excluding: Iterable[threading.Thread] = ()) -> list[threading.Thread]:
    """The threads of this process that may still act for a test: alive, not the caller, not a runner's or
    the harness's, not in ``excluding``, and not a timer that was cancelled or has fired."""
    left = set(excluding)
    me = threading.current_thread()
    return [
        thread
        for thread in threading.enumerate()
        if thread is not me
        and thread not in left
        and thread not in _runners
        and not thread.name.startswith(HARNESS)
        and not (isinstance(thread, threading.Timer) and thread.finished.is_set())
    ]


def reaching(targets: Iterable[object], threads: Iterable[threading.Thread]) -> list[threading.Thread]:
    """Of ``threads``, those that hold one of ``targets`` (see the module)."""
    wanted = {id(target) for target in targets}
    frames = sys._current_frames()
    return [thread for thread in threads if wanted & _reached(thread, frames.get(thread.ident or -1))]


def describe(threads: list[threading.Thread]) -> str:
    """``threads`` by name and kind, for a refusal."""
    return ", ".join(f"{t.name} ({'timer' if isinstance(t, threading.Timer) else 'thread'})" for t in threads)


def _reached(thread: threading.Thread, frame: types.FrameType | None) -> set[int]:
    """The ids of every object ``thread`` holds (its fields, its target and arguments, its frames)."""
    roots: list[object] = [thread]
    while frame is not None:
        roots += [*frame.f_locals.values(), *_named(frame.f_code, frame.f_globals)]
        frame = frame.f_back
    seen: set[int] = set()
    stack = roots
    while stack:
        obj = stack.pop()
        other = isinstance(obj, threading.Thread) and obj is not thread  # what it holds is its own
        if id(obj) in seen or other or isinstance(obj, _OPAQUE):
            continue
        seen.add(id(obj))
        if isinstance(obj, types.FunctionType):  # not its globals: the names its code reads there
            cells = [cell.cell_contents for cell in obj.__closure__ or () if _filled(cell)]
            stack += [*cells, obj.__defaults__, obj.__kwdefaults__, *_named(obj.__code__, obj.__globals__)]
        else:
            stack += gc.get_referents(obj)
    return seen


def _named(code: types.CodeType, globals_: dict) -> list[object]:
    """The globals ``code`` (and the code nested in it) reads by name."""
    names: set[str] = set()
    codes = [code]
    while codes:
        current = codes.pop()
        names.update(current.co_names)
        codes += [c for c in current.co_consts if isinstance(c, types.CodeType)]
    return [globals_[name] for name in names if name in globals_]


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True
