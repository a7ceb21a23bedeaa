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


def run_of(path: Path) -> Path:
    """The run directory a ``--resume`` path names: the path, or the run holding a step dir."""
    return path.parent if (path / "manifest.json").is_file() else path


def _check_resume(out: Path, source: str, resume: Path) -> None:
    """A resumed run writes into ``out``: refuse a ``resume`` path that holds no checkpoint
    unless it is ``out`` itself (a run killed before its first save), and refuse to write a
    resumed run into an ``out`` that holds another run."""
    run = run_of(resume)
    if not run.exists():
        raise ConfigError(f"{source}: --resume {resume}: no such run directory")
    same = run.resolve() == out.resolve()
    if not_started(run) and not same:
        raise ConfigError(
            f"{source}: --resume {resume}: holds no checkpoint (no 'latest', no step-*); "
            f"to start this run afresh, leave out --resume"
        )
    if not same and holds_run(out):
        raise ConfigError(
            f"{source}: output.dir: {out} holds another run, and the run resumed from "
            f"{run} would write into it; set output.dir to {run} or choose an empty folder"
        )


def _replace(out: Path, source: str) -> None:
    """Remove the old run at ``out`` without ever leaving it half deleted: it is first moved
    aside in one rename (nothing is lost if that fails), then deleted."""
    aside = out.with_name(f".{out.name}.replaced-{os.getpid()}")
    try:
        os.replace(out, aside)
    except OSError as exc:
        raise ConfigError(
            f"{source}: --overwrite: cannot move the old run {out} aside "
            f"({exc.strerror or exc}); nothing was deleted"
        ) from None
    try:
        if aside.is_dir() and not aside.is_symlink():
            shutil.rmtree(aside)
        else:
            aside.unlink()
    except OSError as exc:
        raise ConfigError(
            f"{source}: --overwrite: the old run, moved whole to {aside}, could not be deleted "
            f"({exc.strerror or exc}); delete it and train again"
        ) from None


def claim_run_dir(
    out: Path, source: str, *, resume: str | os.PathLike[str] | None, overwrite: bool
) -> None:
    """Check (and with ``overwrite`` clear) the run directory before anything is written.

    ConfigError naming the config's ``output.dir`` when it already holds a run and neither
    ``resume`` (the path to continue from) nor ``overwrite`` is set, or when both are; for a
    ``resume`` path that is not a run, or whose run would be written into another run.
    """
    if resume and overwrite:
        raise ConfigError(f"{source}: --resume and --overwrite exclude each other")
    if resume:
        _check_resume(out, source, Path(resume))
        return
    if not holds_run(out):
        return
    if not overwrite:
        raise ConfigError(
            f"{source}: output.dir: {out} already holds a run; pass --resume {out} to "
            "continue it or --overwrite to delete it and start again"
        )
    _replace(out, source)
