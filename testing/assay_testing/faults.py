"""Fault injection for crash-safety checks: pause a process at an exact filesystem event.

A child process calls ``pause_at_event(n)``; from then on every ``os.fsync``, ``os.rename``,
``os.replace`` and ``os.link`` counts as one event, and at event ``n`` the process prints
``PAUSE`` and sleeps, so the parent can SIGKILL it at that precise point of a write.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable
from typing import Any

EVENTS = ("fsync", "rename", "replace", "link")
PAUSE = "PAUSE"


def pause_at_event(
    kill_at: int, events: tuple[str, ...] = EVENTS, *, announce: bool = False
) -> None:
    """Patch ``os`` so the ``kill_at``-th filesystem event pauses the process (<= 0: never).

    With ``announce`` every event prints ``EVENT <n> <name>``, so a parent can count them.
    """
    if kill_at <= 0 and not announce:
        return
    count = [0]

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def inner(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            count[0] += 1
            if announce:
                print(f"EVENT {count[0]} {fn.__name__}", flush=True)
            if count[0] == kill_at:
                print(PAUSE, flush=True)
                time.sleep(600)
            return result

        return inner

    for name in events:
        setattr(os, name, wrap(getattr(os, name)))


WRITE_EVENTS = ("write", "fsync", "rename", "replace", "link", "mkdir")


class _FailingFile:
    """A file object whose writes count as events of ``counter`` (and may fail)."""

    def __init__(self, handle: Any, counter: FailAt) -> None:
        self._handle, self._counter = handle, counter

    def write(self, data: Any) -> int:
        self._counter.event("file.write")
        return self._handle.write(data)

    def __enter__(self) -> _FailingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


def _is_folder(target: Any) -> bool:
    """Whether ``target`` (a path, or an open file descriptor) is a folder."""
    try:
        if isinstance(target, int):
            return stat.S_ISDIR(os.fstat(target).st_mode)
        return isinstance(target, (str, os.PathLike)) and os.path.isdir(target)
    except OSError:
        return False


class FailAt:
    """While active, every write-side filesystem call (``os.write``, ``os.fsync``,
    ``os.rename``, ``os.replace``, ``os.link``, ``os.mkdir`` and ``write`` on a file opened
    for writing through ``open`` or ``os.fdopen``) is one event; event ``fail_at`` raises
    ``OSError(errno_)`` instead of happening (``fail_at`` <= 0: none fails, only counted), as
    :meth:`event` describes. ``events`` names every event seen, in order; ``failed`` says
    whether the fault fired and ``raised`` what it raised."""

    def __init__(self, fail_at: int, errno_: int = 28) -> None:
        self.fail_at, self.errno = fail_at, errno_
        self.events: list[str] = []
        self.failed = False
        self.raised: OSError | None = None  # what the failed event raised
        self.on_folder = False  # whether it failed on a folder (its fsync, or mkdir of one)
        self._saved: dict[str, Any] = {}

    def event(self, name: str, path: Any = None) -> None:
        """Count one event; at ``fail_at`` raise as the OS would: a call given a path names it
        (``filename``), one given a file descriptor names nothing, and ``mkdir`` of a folder
        that exists answers EEXIST (the kernel checks that before the disk's space)."""
        self.events.append(name)
        if len(self.events) == self.fail_at:
            self.failed = True
            named = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
            self.on_folder = name in ("fsync", "mkdir") and _is_folder(path)
            if name == "mkdir" and self.on_folder:
                self.raised = FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), named)
            else:
                self.raised = OSError(self.errno, os.strerror(self.errno), named)
            raise self.raised

    def _wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def inner(*args: Any, **kwargs: Any) -> Any:
            if name == "write" and args and isinstance(args[0], int) and args[0] <= 2:
                return real(*args, **kwargs)  # the test's own stdout and stderr
            self.event(name, args[0] if args else None)
            return real(*args, **kwargs)

        return inner

    def _opener(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def inner(*args: Any, **kwargs: Any) -> Any:
            handle = real(*args, **kwargs)
            mode = args[1] if len(args) > 1 else kwargs.get("mode", "r")
            return _FailingFile(handle, self) if any(c in mode for c in "wax+") else handle

        return inner

    def __enter__(self) -> FailAt:
        import builtins

        for name in WRITE_EVENTS:
            self._saved[f"os.{name}"] = getattr(os, name)
            setattr(os, name, self._wrap(name, getattr(os, name)))
        self._saved["os.fdopen"], self._saved["open"] = os.fdopen, builtins.open
        os.fdopen = self._opener(os.fdopen)
        builtins.open = self._opener(builtins.open)
        return self

    def __exit__(self, *exc: object) -> None:
        import builtins

        for key, real in self._saved.items():
            if key == "open":
                builtins.open = real
            else:
                setattr(os, key.removeprefix("os."), real)
        self._saved.clear()
