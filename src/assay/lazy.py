"""Package attributes imported on first use, so a package's light sub-modules (a registry, a
config) load without the heavy ones (torch) its top-level names come from."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_attributes(package: str, table: dict[str, str]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``package``: ``name`` in ``table`` is imported from
    the module ``table[name]`` when first asked for, and any other name from the sub-module
    ``package.name`` where there is one (as ``import package; package.sub`` worked when the
    package imported its sub-modules itself); else AttributeError."""

    def __getattr__(name: str) -> Any:
        if name in table:
            return getattr(importlib.import_module(table[name]), name)
        if not name.startswith("__"):
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as err:
                if err.name != f"{package}.{name}":
                    raise  # the sub-module exists and something it imports is missing
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
