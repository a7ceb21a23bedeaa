"""What each claim ran, relied on and read, merged from its gate's fragments into the receipt:
the measured files (:mod:`assay.qualify.plugin.executed`), the import-time closure of those
(:mod:`assay.qualify.plugin.imports`) and the project files opened for reading
(:mod:`assay.qualify.plugin.reads`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def attach(
    fragments: list[dict[str, Any]],
    root: Path | None = None,
    packages: list[str] | None = None,
    outside: list[Path] | None = None,
) -> None:
    """Give each claim of one gate's fragments its ``code_source`` and, when measured, its
    ``executed_files``: its own test's files plus every file the gate-wide context executed
    in any of the gate's tests (import and shared fixtures), so the sets do not depend on
    which test ran first. With ``root``: its ``import_files`` (project modules whose
    import-time code those files rely on, :mod:`assay.qualify.plugin.imports`) and its
    ``read_files`` (project files its test or its gate opened for reading, children
    included, not under ``outside``: :mod:`assay.qualify.plugin.reads`). Fragments without
    measurement data are left as they are."""
    shared: dict[str, str] = {}
    shared_reads: set[str] = set()
    shared_modules: set[str] = set()  # module sources loaded by the gate's import or fixtures
    at_import: dict[str, set[str]] = {}  # module -> what its top-level code read, any process
    for fragment in fragments:
        executed = fragment.get("executed") or {}
        for entry in executed.get("gate", []):
            shared.setdefault(entry["path"], entry["sha256"])
        read = executed.get("read") or {}
        shared_reads.update(read.get("gate", []))
        shared_modules.update((read.get("modules") or {}).get("gate", []))
        for module, paths in (read.get("at_import") or {}).items():
            at_import.setdefault(module, set()).update(paths)
    for fragment in fragments:
        executed = fragment.get("executed")
        if not executed:
            continue
        measured = executed["source"] == "measured"
        files = dict(shared) if measured else {}
        for entry in executed.get("test", []) if measured else []:
            files.setdefault(entry["path"], entry["sha256"])
        read = executed.get("read") or {}
        opened = shared_reads | set(read.get("test", []))
        loaded = shared_modules | set((read.get("modules") or {}).get("test", []))
        for claim in fragment["claims"]:
            claim["code_source"] = executed["source"]
            if measured:
                claim["executed_files"] = [{"path": p, "sha256": files[p]} for p in sorted(files)]
            if root is not None:
                ran = {*files, *(f["path"] for f in claim.get("code_files", []))}
                imported = _under(Path(root), loaded) - ran  # loaded by name, maybe untraced
                _relied_on(
                    claim,
                    sorted(ran | imported),
                    opened,
                    at_import,
                    Path(root),
                    packages or [],
                    outside or [],
                    imported,
                )


def _under(root: Path, paths: set[str]) -> set[str]:
    """Display paths (relative to ``root``) of the module sources in ``paths`` inside it."""
    from assay.qualify.core.source import tree_paths

    top, found = root.resolve(), set()
    for name in paths:
        try:
            found.add(Path(name).resolve().relative_to(top).as_posix())
        except (ValueError, OSError):
            continue
    return tree_paths(root, sorted(found))  # a virtualenv inside the tree is not its code


def _relied_on(
    claim: dict[str, Any],
    ran: list[str],
    opened: set[str],
    at_import: dict[str, set[str]],
    root: Path,
    packages: list[str],
    outside: list[Path],
    imported: set[str] = frozenset(),  # type: ignore[assignment]
) -> None:
    """Set the claim's ``import_files`` and ``read_files`` (each omitted when empty); the files
    a module it ran or relied on opened at import time are among the files it read.
    ``imported``: project modules its test or gate loaded (by name too), which count whether or
    not the tracer saw them run."""
    from assay.qualify.core.source import file_sha256
    from assay.qualify.plugin.imports import import_closure
    from assay.qualify.plugin.reads import project_files

    closure = sorted(set(import_closure(root, sorted({*ran, *imported}), packages)) | imported)
    if closure:
        claim["import_files"] = [{"path": p, "sha256": file_sha256(root / p)} for p in closure]
    # what a module it relies on read at import time counts, whichever test imported it first
    opened = opened.union(*(at_import.get(m, set()) for m in [*ran, *closure]))
    read = project_files(opened, root, outside)
    if read:
        top = root.resolve()
        claim["read_files"] = [
            {"path": p.relative_to(top).as_posix(), "sha256": file_sha256(p)} for p in read
        ]
