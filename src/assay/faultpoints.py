"""Named fault points: places in the product where a gate's control may inject a known defect.

Production code asks ``armed("stream.pool.skip_wait")`` at the one place where a defect class
can be expressed, and keeps its correct behaviour unless a test armed that name. Controls and
mutants go through these names instead of swapping an object's ``__class__`` or adding
control-only flags to production signatures.

A fault is armed in-process with ``inject(name)`` (a context manager), or for a child process
through the environment variable ``ASSAY_FAULTS`` (comma-separated names, ``name=value``
for a value). An unknown name is refused, so a typo cannot arm nothing and pass.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

ENV = "ASSAY_FAULTS"

# name -> what the defect is; a name must be listed here before code may ask for it.
CATALOG: dict[str, str] = {}

_armed: dict[str, str] = {}


def declare(name: str, defect: str) -> str:
    """Register a fault point (module import time); returns ``name`` for use at the call site."""
    if name in CATALOG and CATALOG[name] != defect:
        raise ValueError(f"fault point {name!r} declared twice with different defects")
    CATALOG[name] = defect
    return name


def _from_env() -> dict[str, str]:
    spec = os.environ.get(ENV, "").strip()
    found: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, value = item.partition("=")
        found[name] = value or "1"
    return found


def armed(name: str) -> bool:
    """True when the fault ``name`` is injected in this process (never in normal runs)."""
    if not _armed and ENV not in os.environ:
        return False
    return name in _armed or name in _from_env()


def value(name: str, default: str | None = None) -> str | None:
    """The value a fault was armed with (``name=value``), or ``default`` when not armed."""
    if name in _armed:
        return _armed[name]
    return _from_env().get(name, default)


@contextlib.contextmanager
def inject(name: str, setting: str = "1") -> Iterator[None]:
    """Arm the fault ``name`` for the duration of the block; it must have been declared."""
    if name not in CATALOG:
        known = ", ".join(sorted(CATALOG)) or "none declared"
        raise KeyError(f"unknown fault point {name!r} (known: {known})")
    previous = _armed.get(name)
    _armed[name] = setting
    try:
        yield
    finally:
        if previous is None:
            _armed.pop(name, None)
        else:
            _armed[name] = previous
