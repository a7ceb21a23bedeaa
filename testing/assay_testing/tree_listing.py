"""Every path under a folder with what it holds, links not followed: the before-and-after a
test compares to show a command changed nothing, including where a user's link points."""

from __future__ import annotations

import os
from pathlib import Path


def tree_listing(root: Path) -> dict[str, object]:
    """Relative path -> bytes (a file), ``("link", target)`` (a symlink, never followed) or
    None (a folder), for everything under ``root``."""
    found: dict[str, object] = {}
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(parent) / name
            if path.is_symlink():
                found[str(path.relative_to(root))] = ("link", str(path.readlink()))
            else:
                found[str(path.relative_to(root))] = path.read_bytes() if path.is_file() else None
    return found
