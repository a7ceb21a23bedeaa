"""Output protection for run directories: a run never silently mixes with an older one.

``assay train`` into a directory that already holds a run refuses unless ``--resume``
(continue it) or ``--overwrite`` (delete it and start clean). A run killed before its first
checkpoint has a run directory without ``latest`` or any ``step-*``; resuming it starts at
step 0 with its metrics emptied (:func:`not_started`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from assay.errors import ConfigError

LATEST = "latest"


def not_started(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a run directory with no checkpoint yet (no ``latest``, no
    ``step-*``, no ``manifest.json``): a run killed before its first save."""
    root = Path(path)
    if not root.is_dir() or (root / LATEST).exists() or (root / "manifest.json").exists():
        return False
    return not any(p.name.startswith("step-") for p in root.iterdir())


def holds_run(path: Path) -> bool:
    """True when ``path`` exists and is not an empty directory."""
    if not path.exists():
        return False
    return not path.is_dir() or any(path.iterdir())


def claim_run_dir(out: Path, source: str, *, resume: bool, overwrite: bool) -> None:
    """Check (and with ``overwrite`` clear) the run directory before anything is written.

    ConfigError naming the config's ``output.dir`` when it already holds a run and neither
    ``resume`` nor ``overwrite`` is set, or when both are.
    """
    if resume and overwrite:
        raise ConfigError(f"{source}: --resume and --overwrite exclude each other")
    if resume or not holds_run(out):
        return
    if not overwrite:
        raise ConfigError(
            f"{source}: output.dir: {out} already holds a run; pass --resume {out} to "
            "continue it or --overwrite to delete it and start again"
        )
    if out.is_dir() and not out.is_symlink():
        shutil.rmtree(out)
    else:
        out.unlink()
