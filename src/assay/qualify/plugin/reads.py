"""Files a claim read: the data tables, configs and fixtures on disk its test opened.

A claim depends on more than code. A Python audit hook (PEP 578), installed once per process
that runs gate tests (and in each reporting child, :mod:`assay.qualify.plugin.child_imports`),
notes every file opened for reading while a gate context is current: the test's own
(``t:<nodeid>``) or the gate's (module import and shared fixtures, ``g:<gate>``), the same
contexts :mod:`assay.qualify.plugin.executed` measures code under. Which of them belong to the
project is decided where the receipt is made: regular files under the project root, not code
(``.py``, compiled files), not under the receipts or records folders, and in the tree a
clean checkout holds (no ``.git``, caches, virtualenvs or git-ignored files). Their
sha256 goes in the receipt (``claims[].read_files``) and ``verify --stale`` compares them.

The same hook notes when the import system reads a module's source or bytecode, with the
source's size and mtime then: a file changed on disk after its module was loaded (a second
pytest session in one process) did not run, and is flagged as differing from the tree.

An audit hook cannot be removed, so it stays installed and costs one global lookup per
audited event once no context is current. Standard library only.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import FrameType

# One record per process, kept on ``sys`` rather than in this module: an audit hook cannot be
# removed, so a second import of this module (a test harness restoring sys.modules) must find
# the hook already installed and the reads it noted, not start a second, blind copy.
_STATE: dict[str, Any] = sys.__dict__.setdefault(
    "_assay_gate_reads",
    {"current": None, "seen": {}, "at_import": {}, "loaded": {}, "modules": {}, "installed": False},
)
# context -> paths read while it was current; looked up with None (no context), never a key
_seen: dict[str | None, set[str]] = _STATE["seen"]
_at_import: dict[str, set[str]] = _STATE["at_import"]  # module file -> files its top level read
# module source -> (mtime_ns, size) when the import system last read it (or its bytecode)
_loaded: dict[str, tuple[int, int]] = _STATE.setdefault("loaded", {})
_IMPORT_SYSTEM = "<frozen importlib._bootstrap_external>"
# context -> module sources the import system loaded while it was current
_modules: dict[str, set[str]] = _STATE.setdefault("modules", {})
_LIMIT = 20_000  # paths per context: a runaway reader must not hold the session's memory
CODE_SUFFIXES = {".py", ".pyc", ".pyo", ".so", ".pyd", ".pth"}


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "sqlite3.connect":  # SQLite opens its file in C, past the "open" event
        database = args[0]
        if isinstance(database, (str, bytes, os.PathLike)):
            name = os.fsdecode(database)
            _note(name.removeprefix("file:").split("?", 1)[0])
        return
    if event != "open":
        return
    path, mode, flags = args
    if mode is not None:
        if any(ch in mode for ch in "wax+"):
            return
    elif isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR):
        return
    if isinstance(path, int):  # a descriptor, opened (and noted) before
        return
    name = os.fsdecode(path) if isinstance(path, bytes) else str(path)
    if os.path.splitext(name)[1] in CODE_SUFFIXES:
        if sys._getframe(1).f_code.co_filename == _IMPORT_SYSTEM:
            _note_loaded(name)
        return
    _note(name)


def _note(name: str) -> None:
    name = os.path.abspath(name)
    current = _STATE["current"]
    if current is not None:
        found = _seen.setdefault(current, set())
        if len(found) < _LIMIT:
            found.add(name)
    importing = _importing_module()
    if importing is not None:  # read at import time: it counts wherever the module is relied on
        during = _at_import.setdefault(importing, set())
        if len(during) < _LIMIT:
            during.add(name)


def _note_loaded(name: str) -> None:
    """The import system is reading a module's source or bytecode: remember its source's
    size and mtime now, which is the code this process runs until it loads the module again."""
    source = name
    if name.endswith(".pyc"):
        try:
            source = importlib.util.source_from_cache(name)
        except ValueError:  # a sourceless .pyc: nothing on disk to differ from
            return
    try:
        stat = os.stat(source)
    except OSError:
        return
    _loaded[os.path.abspath(source)] = (stat.st_mtime_ns, stat.st_size)
    current = _STATE["current"]
    if current is not None:  # a module imported by name (importlib) counts where it loaded
        found = _modules.setdefault(current, set())
        if len(found) < _LIMIT:
            found.add(os.path.abspath(source))


def _importing_module() -> str | None:
    """The file of the module whose top-level code is running now, if any (the innermost)."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(64):
        if frame is None:
            return None
        if frame.f_code.co_name == "<module>":
            return frame.f_code.co_filename
        frame = frame.f_back
    return None


def install() -> None:
    """Install the audit hook (once per process)."""
    if not _STATE["installed"]:
        sys.addaudithook(_hook)
        _STATE["installed"] = True


def switch(context: str | None) -> None:
    """Note reads under ``context`` from now on (None: stop noting)."""
    _STATE["current"] = context


def read_under(context: str | None) -> set[str]:
    """The paths opened for reading while ``context`` was current, in this process."""
    return set(_seen.get(context, ()))


def changed_since_loaded(path: Path) -> bool:
    """Whether the module source at ``path`` was loaded by this process and has changed on disk
    since (size or mtime): the code that ran is then not the file's (a second pytest session
    in one process, a notebook, a watch loop)."""
    seen = _loaded.get(os.path.abspath(path))
    if seen is None:
        return False
    try:
        stat = os.stat(path)
    except OSError:
        return True
    return (stat.st_mtime_ns, stat.st_size) != seen


def loaded_under(context: str | None) -> set[str]:
    """Module sources the import system loaded while ``context`` was current, in this process."""
    return set(_modules.get(context, ())) if context else set()


def read_at_import() -> dict[str, set[str]]:
    """Module file -> the files its top-level code opened for reading, in this process, whatever
    gate (or none) was current when it was imported."""
    return {module: set(paths) for module, paths in _at_import.items()}


def project_files(paths: Iterable[str], root: Path, outside: Iterable[Path] = ()) -> list[Path]:
    """The project's data files among ``paths``: regular files under ``root`` that are not code,
    belong to its tree (:func:`~assay.qualify.core.source.tree_paths`: no caches, virtualenvs
    or git-ignored files) and are not under any of ``outside`` (the receipts and records the
    session writes), each once, sorted."""
    from assay.qualify.core.source import tree_paths

    root = Path(root).resolve()
    excluded = [Path(p).resolve() for p in outside]
    found = set()
    for name in paths:
        try:
            path = Path(name).resolve()
            path.relative_to(root)
        except (ValueError, OSError):
            continue
        if path.suffix in CODE_SUFFIXES or not path.is_file():
            continue
        if any(path == e or e in path.parents for e in excluded):
            continue
        found.add(path)
    kept = tree_paths(root, [p.relative_to(root).as_posix() for p in found])
    return sorted(p for p in found if p.relative_to(root).as_posix() in kept)
