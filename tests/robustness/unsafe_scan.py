"""Find unsafe deserialisation in Python source: pickle loads, and torch.load or numpy.load
that may unpickle (no ``weights_only=True`` / an ``allow_pickle=True``)."""

from __future__ import annotations

import ast
from pathlib import Path

PICKLERS = {"pickle", "cPickle", "_pickle", "dill", "joblib", "cloudpickle", "marshal", "shelve"}
UNPICKLE = {"load", "loads", "Unpickler", "open"}


def _keyword(call: ast.Call, name: str) -> object:
    for kw in call.keywords:
        if kw.arg == name and isinstance(kw.value, ast.Constant):
            return kw.value.value
    return None


def unsafe_calls(source: str, filename: str = "<source>") -> list[str]:
    """``file:line: what`` for each unsafe load in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.ImportFrom) and node.module in PICKLERS:
            names = [a.name for a in node.names if a.name in UNPICKLE]
            if names:
                found.append(f"{filename}:{node.lineno}: from {node.module} import {names}")
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        owner_name = owner.id if isinstance(owner, ast.Name) else None
        attr = node.func.attr
        if owner_name in PICKLERS and attr in UNPICKLE:
            found.append(f"{filename}:{node.lineno}: {owner_name}.{attr}")
        elif (
            owner_name == "torch" and attr == "load" and _keyword(node, "weights_only") is not True
        ):
            found.append(f"{filename}:{node.lineno}: torch.load without weights_only=True")
        elif owner_name in ("np", "numpy") and attr == "load" and _keyword(node, "allow_pickle"):
            found.append(f"{filename}:{node.lineno}: numpy.load with allow_pickle=True")
    return found


def scan_tree(root: Path) -> list[str]:
    """Every unsafe load in the ``*.py`` files under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        found.extend(unsafe_calls(path.read_text(encoding="utf-8"), str(path)))
    return found
