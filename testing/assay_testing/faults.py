"""Fault injection for crash-safety checks: pause a process at an exact filesystem event.

A child process calls ``pause_at_event(n)``; from then on every ``os.fsync``, ``os.rename``,
``os.replace`` and ``os.link`` counts as one event, and at event ``n`` the process prints
``PAUSE`` and sleeps, so the parent can SIGKILL it at that precise point of a write.
"""

from __future__ import annotations

import os
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
