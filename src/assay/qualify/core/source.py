"""Files as the framework reads them without importing or trusting them: their sha256, and
literal module-level constants read with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, cast

from assay.digest import file_sha256 as file_sha256  # re-exported: the framework's name
from assay.qualify.core.git import git_output
from assay.qualify.core.portable import is_outside


def module_constant(path: Path, name: str) -> Any:
    """The literal value of a module-level ``name = <literal>`` in ``path``, or None (the file
    is parsed, never imported)."""
    try:
        tree = ast.parse(Path(path).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        # only an Assign or AnnAssign has targets, so node is one wherever .value is read
        assignment = cast("ast.Assign | ast.AnnAssign", node)
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and assignment.value:
            try:
                return ast.literal_eval(assignment.value)
            except ValueError:
                return None
    return None


# Folders a clean checkout never holds, whatever a project's .gitignore says: git itself,
# bytecode, virtualenvs and tool caches (hypothesis writes one during a run), build metadata.
NOT_TREE_DIRS = frozenset(
    {
        ".git",
        "__pycache__",
        ".nox",
        ".venv",
        "venv",
        ".tox",
        "site-packages",
        ".hypothesis",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
    }
)
NOT_TREE_SUFFIXES = (".egg-info", ".dist-info")


def tree_paths(root: Path, paths: list[str]) -> set[str]:
    """Those of ``paths`` (relative to ``root``, POSIX) that belong to the project's tree: not
        under a folder of :data:`NOT_TREE_DIRS` or a ``*.egg-info``/``*.dist-info`` folder, and
        tracked or not ignored by git. A file outside the tree differs from one clean checkout to
        the next, so no record may depend on it. Paths outside the project (absolute, ``~/``,
    ``<site-packages>/``, ``<tmp>/``) are kept."""

    def cache_or_build(path: str) -> bool:
        folders = Path(path).parts[:-1]
        return bool(set(folders) & NOT_TREE_DIRS) or any(
            f.endswith(NOT_TREE_SUFFIXES) for f in folders
        )

    kept = [p for p in paths if is_outside(p) or not cache_or_build(p)]
    relative = [p for p in kept if not is_outside(p)]
    # tracked files are never reported (no --no-index); exit 1 means none ignored
    found = git_output(root, "check-ignore", "--stdin", "-z", stdin="\0".join(relative), ok=(0, 1))
    ignored = set(filter(None, (found or "").split("\0")))
    return {p for p in kept if p not in ignored}
