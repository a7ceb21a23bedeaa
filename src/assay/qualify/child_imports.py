"""What a gate test's child processes imported, so that ``code=`` is checked there too.

A claim may list only code its test ran (:meth:`assay.qualify.gate.Gate.stale_code`). Code
that runs in a child process (a CLI run, torchrun ranks) is imported there, not in the test
process. While a gate test runs, the ``gate`` fixture sets :data:`ENV` to a fresh directory;
a child that calls :func:`report_at_exit` writes the names of the modules it imported into it
when it exits normally, and the fixture adds them to what the test ran.

A fixture that starts child processes outside any one test (a module-scoped run shared by
several tests) wraps them in :func:`recording` itself and hands the set to each test's
``gate.child_imports(...)``.

A project makes its child processes report by calling :func:`report_at_exit` at import of its
top-level package (assay does, in ``assay/__init__.py``) or in its child entry script. It costs
one environment lookup when no gate test is running. Standard library only.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ENV = "ASSAY_GATE_IMPORTS"
_registered = False


def report_at_exit() -> None:
    """Inside a gate test's child process, write this process's imported module names at exit.

    Does nothing when :data:`ENV` is unset (not under a gate test) and registers once per
    process. A child killed by a signal writes nothing: its imports are simply not counted.
    """
    global _registered
    directory = os.environ.get(ENV)
    if not directory or _registered:
        return
    _registered = True
    atexit.register(_write, Path(directory))


def _write(directory: Path) -> None:
    if not directory.is_dir():  # the test that started us has finished and cleaned up
        return
    names = {name for name in list(sys.modules) if isinstance(name, str)}
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:  # `python -m pkg.mod` runs pkg.mod under __main__
        names.add(spec.name)
    # temp file then rename: the reader never sees half a list
    fd, temp = tempfile.mkstemp(dir=directory, prefix=".imports-", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(sorted(names), handle)
    os.replace(temp, directory / f"imports-{os.getpid()}.json")


def collect(directory: Path) -> set[str]:
    """The union of the module names every finished child wrote into ``directory``."""
    found: set[str] = set()
    for path in sorted(directory.glob("imports-*.json")):
        try:
            names = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):  # a child that died mid-write reported nothing
            continue
        if isinstance(names, list):
            found.update(n for n in names if isinstance(n, str))
    return found


@contextlib.contextmanager
def recording() -> Iterator[set[str]]:
    """Point :data:`ENV` at a private directory for the block; child processes started in it
    that report are added to the yielded set when the block ends. Nests: the previous value
    of :data:`ENV` is restored."""
    directory = Path(tempfile.mkdtemp(prefix="assay-gate-imports-"))
    previous = os.environ.get(ENV)
    os.environ[ENV] = str(directory)
    reported: set[str] = set()
    try:
        yield reported
    finally:
        if previous is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = previous
        reported.update(collect(directory))
        shutil.rmtree(directory, ignore_errors=True)
