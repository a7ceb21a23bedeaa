"""Files as the framework reads them without importing or trusting them: their sha256, and
literal module-level constants read with ``ast``."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path
from typing import Any


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in chunks so large model files stay cheap."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value:
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                return None
    return None


def git_env() -> dict[str, str]:
    """The environment for reading git history as committed: replace objects and grafts
    (``git replace --graft``), which can hide commits from every reader, are ignored."""
    import os

    return {**os.environ, "GIT_NO_REPLACE_OBJECTS": "1", "GIT_GRAFT_FILE": os.devnull}


def git_output(root: Path, *args: str) -> str | None:
    """git's stdout for ``args`` run in ``root`` (history as committed, :func:`git_env`); None
    when git is missing, slow (20 s) or fails."""
    import subprocess

    try:
        done = subprocess.run(
            ["git", *args],
            cwd=root,
            env=git_env(),
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None
