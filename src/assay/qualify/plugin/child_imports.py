"""What a gate session's child processes imported and read, so that ``code=`` is checked there
too and the files a claim's child opened count for the claim.

A claim may list only code its gate reaches (:meth:`assay.qualify.plugin.gate.Gate.stale_code`),
read from the source its gate module imports. Code that a child process imports by other
means (``python -c "import x"``, a script path) is imported only there. Once a process has
collected gate tests, the plugin points :data:`ENV` at a private directory
(:class:`ChildImports`); a child that calls :func:`report_at_exit` writes the names of the
modules it imported into it when it exits normally, with the gate context it was started in
(``ASSAY_GATE_CONTEXT``: the test's, or its gate's for a shared fixture), and those names
count for that test and that gate only, never for another gate's tests. The child also notes
the files it opens for reading (:mod:`assay.qualify.plugin.reads`) under the same context and
reports them with its imports.

A project makes its child processes report by calling :func:`report_at_exit` in its child
entry points (assay does, at import of ``assay.cli`` and in its gates' child scripts). It costs
one environment lookup when no gate session is running. Standard library only.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

ENV = "ASSAY_GATE_IMPORTS"
CONTEXT_ENV = "ASSAY_GATE_CONTEXT"  # the gate context a child was started in (executed.py)
_registered = False


def report_at_exit() -> None:
    """Inside a gate session's child process, write its imported module names at exit.

    Does nothing when :data:`ENV` is unset (no gate session) and registers once per process.
    A child killed by a signal writes nothing: its imports are simply not counted.
    """
    global _registered
    directory = os.environ.get(ENV)
    if not directory or _registered:
        return
    _registered = True
    context = os.environ.get(CONTEXT_ENV)
    if context:
        from assay.qualify.plugin import reads

        reads.install()
        reads.switch(context)
    atexit.register(_write, Path(directory), context)


def _write(directory: Path, context: str | None) -> None:
    if not directory.is_dir():  # the session that started us has finished and cleaned up
        return
    from assay.qualify.plugin import reads

    names = {name for name in list(sys.modules) if isinstance(name, str)}
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:  # `python -m pkg.mod` runs pkg.mod under __main__
        names.add(spec.name)
    report = {
        "modules": sorted(names),
        "context": context,
        "read": sorted(reads.read_under(context)) if context else [],
    }
    # temp file then rename: the reader never sees half a report
    fd, temp = tempfile.mkstemp(dir=directory, prefix=".imports-", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(report, handle)
    os.replace(temp, directory / f"imports-{os.getpid()}.json")


class ChildImports:
    """One process's collector: owns :data:`ENV` from :meth:`start` to :meth:`stop` and reads
    each child's report once, however many gate tests ask."""

    def __init__(self) -> None:
        self.directory: Path | None = None
        self._previous: str | None = None
        self._read: set[str] = set()
        self._names: dict[str | None, set[str]] = {}  # context a child started in -> modules
        self._opened: dict[str, set[str]] = {}

    def start(self) -> None:
        """Point :data:`ENV` at a fresh directory (once); children started from now report."""
        if self.directory is not None:
            return
        self.directory = Path(tempfile.mkdtemp(prefix="assay-gate-imports-"))
        self._previous = os.environ.get(ENV)
        os.environ[ENV] = str(self.directory)

    def names(self, contexts: Iterable[str | None]) -> set[str]:
        """The module names reported by the children, exited so far, that were started under
        one of ``contexts`` (a test's and its gate's): what another gate's children imported
        never counts, so a verdict does not depend on which gates ran first."""
        self._collect()
        return set().union(*(self._names.get(c, set()) for c in contexts))

    def reads(self, context: str) -> set[str]:
        """The files the children started under ``context`` opened for reading."""
        self._collect()
        return set(self._opened.get(context, ()))

    def _collect(self) -> None:
        if self.directory is None:
            return
        for path in sorted(self.directory.glob("imports-*.json")):
            if path.name in self._read:
                continue
            self._read.add(path.name)
            try:
                report = json.loads(path.read_text("utf-8"))
            except (OSError, ValueError):  # a child that died mid-write reported nothing
                continue
            if not isinstance(report, dict):
                continue
            context = report.get("context")
            names = self._names.setdefault(context if isinstance(context, str) else None, set())
            names.update(n for n in report.get("modules", []) if isinstance(n, str))
            if isinstance(context, str):
                opened = self._opened.setdefault(context, set())
                opened.update(r for r in report.get("read", []) if isinstance(r, str))

    def stop(self) -> None:
        """Restore :data:`ENV` as it was before :meth:`start` and remove the directory."""
        if self.directory is None:
            return
        if self._previous is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = self._previous
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory = None
