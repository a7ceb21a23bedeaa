"""The modules a gate can reach: what its claims may declare as the code they run.

A claim names the modules its test runs (``code=``); a module its gate cannot reach is a stale
declaration (renamed, removed, or never used by this gate). What a gate reaches is read from
source, never from the process, so the answer is the same whether the gate runs alone, with
every other gate, in any order or on any worker: a module another test happened to import
first counts for nobody. Starting at the gate module, a file reaches

- every module an ``import`` statement anywhere in it names (a function's too: it runs, or
  may), with the packages on the way, relative imports resolved against the file's package;
- every module a string in it names by its dotted path (a registry's ``"pkg.mod:Class"``,
  the ``-m pkg.cli`` of a child process), since code imports those by name;

and then whatever those modules' files reach, transitively. Files followed: the project's own
(under its root) and those of the top-level packages the claims name (so an installed copy of
the subject is followed too); the standard library and other installed packages are not read.
Standard library only.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import TypeGuard

# a dotted module path, optionally with ``:attribute`` (how registries and entry points name code)
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_][\w.]*)?")


def _is_dotted(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and len(value) < 200 and _DOTTED.fullmatch(value) is not None


@lru_cache(maxsize=8192)
def _named_in(path: str, mtime_ns: int) -> tuple[tuple[tuple[int, str, str], ...], tuple[str, ...]]:
    """(import statements as (level, module, name), dotted strings) of a source file; cached
    per file version. A file that does not parse names nothing."""
    try:
        tree = ast.parse(Path(path).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return (), ()
    imports: list[tuple[int, str, str]] = []
    strings: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports.extend((0, alias.name, "") for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imports.extend((node.level, node.module or "", a.name) for a in node.names)
        elif isinstance(node, ast.Constant) and _is_dotted(node.value):
            strings.append(node.value.partition(":")[0])
    return tuple(imports), tuple(strings)


def _origin(name: str) -> str | None:
    """The source file of module ``name`` (a package's ``__init__.py``), found on disk from
    its top-level package's location: nothing is imported to ask."""
    module = sys.modules.get(name)
    found = getattr(module, "__file__", None) if module is not None else None
    if isinstance(found, str):
        return found if found.endswith(".py") else None
    top, _, rest = name.partition(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: finding it imports nothing
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None:
        return None
    if not rest:
        return spec.origin if spec.has_location and str(spec.origin).endswith(".py") else None
    locations = [Path(p) for p in spec.submodule_search_locations or ()]
    parts = rest.split(".")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        packages = [loc / part for loc in locations if (loc / part / "__init__.py").is_file()]
        if last and packages:
            return str(packages[0] / "__init__.py")
        if last:
            files = [loc / f"{part}.py" for loc in locations if (loc / f"{part}.py").is_file()]
            return str(files[0]) if files else None
        if not packages:
            return None
        locations = packages
    return None


class Reach:
    """What a gate module reaches, for one project root and the top-level packages to follow
    besides the project's own files."""

    def __init__(self, root: Path, packages: set[str]) -> None:
        self.root = Path(root).resolve()
        self.packages = set(packages)
        self._followed: dict[str, bool] = {}

    def _follows(self, top: str) -> bool:
        """Whether modules under top-level name ``top`` are read: a package the claims name, or
        one whose files lie under the project root. Asking never imports it."""
        if top not in self._followed:
            origin = _origin(top) if top not in self.packages else None
            inside = origin is not None and Path(origin).resolve().is_relative_to(self.root)
            self._followed[top] = top in self.packages or inside
        return self._followed[top]

    def modules(self, gate_file: Path) -> frozenset[str]:
        """Every module name ``gate_file`` reaches (see the module docstring)."""
        return self._modules(str(Path(gate_file).resolve()))

    @lru_cache(maxsize=256)  # noqa: B019 - one Reach per session; gate files are few
    def _modules(self, gate_file: str) -> frozenset[str]:
        reached: set[str] = set()
        queue: list[tuple[str, str]] = [("", gate_file)]  # (module name, its file)
        while queue:
            name, path = queue.pop()
            package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
            try:
                version = Path(path).stat().st_mtime_ns
            except OSError:
                continue
            imports, strings = _named_in(path, version)
            candidates = list(strings)
            for level, module, member in imports:
                if level:
                    base = package.split(".")[: max(len(package.split(".")) - level + 1, 0)]
                    module = ".".join([*filter(None, base), *([module] if module else [])])
                candidates.append(f"{module}.{member}" if member else module)
                candidates.append(module)
            for candidate in candidates:
                parts = candidate.split(".")
                if not parts[0] or not self._follows(parts[0]):
                    continue
                for i in range(1, len(parts) + 1):  # a.b.c reaches a, a.b and a.b.c
                    dotted = ".".join(parts[:i])
                    if dotted in reached:
                        continue
                    origin = _origin(dotted)
                    if origin is None:
                        break
                    reached.add(dotted)
                    queue.append((dotted, origin))
        return frozenset(reached)


@lru_cache(maxsize=64)
def reach(root: Path, packages: frozenset[str]) -> Reach:
    """One :class:`Reach` per project root and followed packages, kept for the process."""
    return Reach(root, set(packages))
