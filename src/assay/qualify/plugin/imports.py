"""Modules whose import-time code a claim relied on, whichever test imported them first.

Coverage sees a module's top-level lines run once per process, under whatever test imported
it first; a later claim that relies on the same constants, tables or registrations executes
none of them. So a claim's provenance also holds the closure of what its executed files import:
every import statement in an executed file (a function's too: it ran or may run), then, for a
module pulled in that way, the imports at its own top level, and the ``__init__`` of every
package on the way. Computed from the project's source files alone (``ast``), so it is the same
in every process, test order and xdist split. Only modules of the project under test count, and
the tree's modules that a script (a gate module) imports from its own folder, which is on its
import path (``support.helpers`` beside ``gates/gate_x.py``).
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

INSTRUMENT = "assay.qualify"


def _entries(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [f"0:{a.name}:" for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [f"{node.level}:{node.module or ''}:{a.name}" for a in node.names]
    return []


@lru_cache(maxsize=4096)
def _imports(path: Path, mtime_ns: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(imports that run at import time, imports anywhere) of a source file, each as
    ``level:module:name``; cached per file version. Import time is everything outside a
    function body (class bodies and ``if``/``try`` blocks at top level run on import)."""
    try:
        tree = ast.parse(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return (), ()
    anywhere = [e for node in ast.walk(tree) for e in _entries(node)]
    top: list[str] = []
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        top.extend(_entries(node))
        pending.extend(ast.iter_child_nodes(node))
    return tuple(top), tuple(anywhere)


class ProjectModules:
    """The modules of the project under test found under ``root``: name <-> display path."""

    def __init__(
        self,
        root: Path,
        packages: list[str],
        paths: list[str],
        beside: set[tuple[Path, str]] = frozenset(),  # type: ignore[assignment]
    ) -> None:
        self.root = Path(root)
        self.by_name: dict[str, str] = {}
        self.by_path: dict[str, str] = {}
        bases = set(beside)
        for path in paths:
            parts = Path(path).parts
            for package in packages:
                if package in parts and not Path(path).is_absolute():
                    bases.add((Path(*parts[: parts.index(package)]), package))
        for package in packages:  # the tree's own copy, where nothing executed reveals it
            for base in (Path("src"), Path()):
                if (self.root / base / package).is_dir():
                    bases.add((base, package))
        for base, package in sorted(bases):
            folder = self.root / base / package
            single = folder.with_suffix(".py")
            found = (
                folder.rglob("*.py") if folder.is_dir() else [single] if single.is_file() else []
            )
            for file in found:
                if "__pycache__" in file.parts:
                    continue
                rel = file.relative_to(self.root / base).with_suffix("")
                names = list(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
                if ".".join(names).startswith(INSTRUMENT):
                    continue  # the framework is the instrument, never the subject
                shown = file.relative_to(self.root).as_posix()
                self.by_name[".".join(names)] = shown
                self.by_path[shown] = ".".join(names)

    def packages_holding(self, shown: str) -> list[str]:
        """Display paths of the ``__init__`` of every package holding module ``shown`` (each
        runs before the module's own top level)."""
        module = self.by_path.get(shown)
        if module is None:
            return []
        parts = module.split(".")
        names = [".".join(parts[:i]) for i in range(1, len(parts))]
        return [self.by_name[n] for n in names if n in self.by_name and self.by_name[n] != shown]

    def targets(self, shown: str, entries: tuple[str, ...]) -> set[str]:
        """Display paths of the project modules the import ``entries`` of file ``shown`` name,
        with the packages on the way."""
        module = self.by_path.get(shown)  # None: a script such as a gate module
        package = "" if module is None else module
        if module is not None and not shown.endswith("__init__.py"):
            package = module.rpartition(".")[0]
        found = set()
        for entry in entries:
            level, base, name = entry.split(":", 2)
            if int(level) and module is None:
                continue  # a relative import in a script resolves to nothing of the project
            if int(level):
                up = package.split(".")[: len(package.split(".")) - int(level) + 1]
                base = ".".join([*up, *([base] if base else [])])
            for candidate in (f"{base}.{name}" if name else base, base):
                parts = candidate.split(".")
                for i in range(1, len(parts) + 1):  # a.b.c imports a, a.b and a.b.c
                    if ".".join(parts[:i]) in self.by_name:
                        found.add(self.by_name[".".join(parts[:i])])
        return found


def _script(root: Path, shown: str) -> bool:
    """A Python file of the tree outside the project's packages (a gate module): its imports
    count, as an executed file's do."""
    return shown.endswith(".py") and not Path(shown).is_absolute() and (root / shown).is_file()


def _beside_scripts(root: Path, files: list[str]) -> set[tuple[Path, str]]:
    """(folder, top-level name) of each module or package under ``root`` that a script of
    ``files`` (a file in a folder that is no package, such as a gate module) imports from its
    own folder, which is on its import path when it runs."""
    found = set()
    for shown in files:
        folder = Path(root) / Path(shown).parent
        if not _script(root, shown) or (folder / "__init__.py").is_file():
            continue
        path = Path(root) / shown
        for entry in _imports(path, path.stat().st_mtime_ns)[1]:
            level, base, name = entry.split(":", 2)
            top = (base or name).split(".")[0]
            if int(level) == 0 and (
                (folder / top / "__init__.py").is_file() or (folder / f"{top}.py").is_file()
            ):
                found.add((Path(shown).parent, top))
    return found


def import_closure(root: Path, files: list[str], packages: list[str]) -> list[str]:
    """Display paths of the project modules whose import-time code ``files`` (display paths of
    what ran or was loaded) rely on: every module their imports reach, and the packages that
    hold them; sorted. A module in ``files`` counts when an import reaches it, so a module whose
    top level ran under this test (it imported it first) counts as it does for a test that
    found it loaded."""
    project = ProjectModules(root, packages, files, _beside_scripts(root, files))
    executed = [f for f in files if f in project.by_path or _script(root, f)]
    reached = {p for f in executed for p in project.packages_holding(f)}
    expanded = set(executed) | reached
    queue = [(f, True) for f in executed] + [(p, False) for p in sorted(reached)]
    while queue:
        shown, ran = queue.pop()
        path = project.root / shown
        try:
            version = path.stat().st_mtime_ns
        except OSError:
            continue
        top, anywhere = _imports(path, version)
        for target in project.targets(shown, anywhere if ran else top):
            reached.add(target)
            if target not in expanded:
                expanded.add(target)
                queue.append((target, False))
    return sorted(reached)
