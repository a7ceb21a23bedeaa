"""Where the files a receipt names are, as receipts show them: relative to the project root,
and an installed copy of one of the tree's own packages under the tree's path, so staleness and
``differs_from_tree`` compare it with the checkout."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path


def package_files(origin: str | None, locations: Iterable[str]) -> list[Path]:
    """Every ``.py`` file under a package's directories (caches skipped), its ``__init__.py``
    (``origin``) first and the rest sorted, so the list is the same on every machine."""
    first = [Path(origin)] if origin and origin.endswith(".py") and Path(origin).is_file() else []
    rest = {
        path
        for location in locations
        for path in Path(location).rglob("*.py")
        if "__pycache__" not in path.parts and path.is_file()
    }
    return first + sorted(rest - set(first))


@lru_cache(maxsize=4096)
def _top_package(folder: Path) -> Path | None:
    """The outermost package folder (one with ``__init__.py``) holding ``folder``, or None."""
    found = None
    while (folder / "__init__.py").is_file():
        found = folder
        folder = folder.parent
    return found


def display_path(root: Path, path: Path) -> str:
    """``path`` as receipts show it: relative to ``root`` (the rootdir) when under it; a file of
    an installed copy of a package the tree also holds (``<root>/src/<name>`` or
    ``<root>/<name>``, e.g. an installed assay) as the tree's path, so staleness and the
    ``differs_from_tree`` check compare the two; assay's own files as ``src/assay/...``
    wherever it runs; else absolute."""
    resolved = Path(path).resolve()
    top = Path(root).resolve()
    try:
        return resolved.relative_to(top).as_posix()
    except ValueError:
        pass
    package = _top_package(resolved.parent)
    if package is not None:
        inside = resolved.relative_to(package).as_posix()
        for tree in (top / "src" / package.name, top / package.name):
            if tree.is_dir():
                return f"{tree.relative_to(top).as_posix()}/{inside}"
        if package.name == "assay":  # assay's own files keep its checkout's layout anywhere
            return f"src/assay/{inside}"
    return resolved.as_posix()
