"""The identity of what ran: the distribution and module the gates actually imported.

A receipt names the project under test. ``pyproject.toml`` says what the checkout declares,
but the gates may have imported something else (an older installed copy, a wheel, another
distribution that provides the same top-level module). So the subject is read from the
imported module: its file, the distribution that provides it (``importlib.metadata``), that
distribution's version, and whether it is an editable install (PEP 610 ``direct_url.json``).
The declaration is kept beside it when the two disagree.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import os
    from collections.abc import Callable


def module_name(dist: str) -> str:
    """The top-level module ``dist`` provides (by installed metadata), else its name with
    dashes and dots turned into underscores, as packaging tools do."""
    for module, dists in metadata.packages_distributions().items():
        if any(_same(d, dist) for d in dists):
            return module
    return dist.replace("-", "_").replace(".", "_")


def _same(a: str, b: str) -> bool:
    norm: Callable[[str], str] = lambda s: s.lower().replace("-", "_").replace(".", "_")  # noqa: E731
    return norm(a) == norm(b)


def _editable(dist: metadata.Distribution) -> bool:
    text = dist.read_text("direct_url.json")
    if not text:
        return False
    try:
        return bool(json.loads(text).get("dir_info", {}).get("editable", False))
    except (ValueError, AttributeError):
        return False


def _provider(module: str, path: Path, wanted: str | None) -> metadata.Distribution | None:
    """The installed distribution that provides the imported ``module`` at ``path``: the one
    whose RECORD lists that file, else the only candidate, else the one named ``wanted``."""
    names = metadata.packages_distributions().get(module, [])
    dists = []
    for name in dict.fromkeys(names):
        try:
            dists.append(metadata.distribution(name))
        except metadata.PackageNotFoundError:
            continue
    for dist in dists:
        for file in dist.files or []:
            try:
                # typeshed's SimplePath lacks __fspath__; importlib's distributions return a Path
                if Path(cast("os.PathLike[str]", dist.locate_file(file))).resolve() == path:
                    return dist
            except (OSError, ValueError):
                continue
    if len(dists) == 1:
        return dists[0]
    return next((d for d in dists if wanted and _same(d.metadata["Name"], wanted)), None)


def imported_identity(name: str, declared: str | None, source: str) -> dict[str, Any]:
    """The receipt's ``subject`` for distribution ``name``: what the gates imported when
    its module is loaded, else the declaration labelled as not imported."""
    module = module_name(name)
    loaded = sys.modules.get(module)
    origin = getattr(loaded, "__file__", None)
    if loaded is None or origin is None:
        version = declared or _installed_version(name)
        return {
            "name": name,
            "version": version,
            "source": f"{source} (the gates did not import {module!r}; not checked)",
        }
    path = Path(origin).resolve()
    dist = _provider(module, path, name)
    subject: dict[str, Any] = {"module": module, "path": str(path.parent)}
    if dist is None:  # nothing says which version ran: never the declaration's word for it
        subject.update(
            name=name,
            version=None,
            source=f"{source} (no installed distribution provides the imported {module!r}; "
            "the version that ran is not known)",
        )
    else:
        subject.update(
            name=dist.metadata["Name"],
            version=dist.version,
            source="imported distribution",
            editable=_editable(dist),
        )
    if declared is not None and subject["version"] != declared:
        subject["declared"] = declared
    return subject


def _installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
