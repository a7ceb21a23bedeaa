"""Output protection for run directories: a run never silently mixes with an older one, and
one run folder has one writer.

``assay train`` into a directory that already holds a run refuses unless ``--resume``
(continue it) or ``--overwrite`` (replace it). :func:`claim_run_dir` checks, then takes the
folder's lock (:mod:`assay.train.run_lock`) and checks again under it, so of two processes
started together exactly one trains and the other is refused naming it.

``--overwrite`` is whole or nothing: the old run is renamed aside in one step
(``.<name>.replaced-<pid>``) and stays there until the new run's first checkpoint
(:meth:`RunClaim.checkpointed` then deletes it); a new run that fails before that puts the old
one back (:meth:`RunClaim.release`). A run killed before its first checkpoint has a run
directory without ``latest`` or any ``step-*``; resuming it starts at step 0 with its metrics
emptied (:func:`not_started`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from assay.errors import ConfigError
from assay.train.run_lock import LOCK_NAME, RunLock, acquire, refuse_if_held

LATEST = "latest"


def not_started(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a run directory with no checkpoint yet (no ``latest``, no
    ``step-*``, no ``manifest.json``): a run killed before its first save."""
    root = Path(path)
    if not root.is_dir() or (root / LATEST).exists() or (root / "manifest.json").exists():
        return False
    return not any(p.name.startswith("step-") for p in root.iterdir())


def holds_run(path: Path) -> bool:
    """True when ``path`` exists and is not an empty directory (its lock file aside)."""
    if not path.exists():
        return False
    return not path.is_dir() or any(p.name != LOCK_NAME for p in path.iterdir())


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


def _check(out: Path, source: str, resume: str | os.PathLike[str] | None, overwrite: bool) -> None:
    if out.is_symlink() and not out.exists():
        raise ConfigError(
            f"{source}: output.dir: {out} is a symlink to a missing target; expected a folder"
        )
    if out.exists() and not out.is_dir():  # a user's file is never a run, nor overwritten
        raise ConfigError(f"{source}: output.dir: {out} is a file, not a folder; choose a folder")
    if resume and overwrite:
        raise ConfigError(f"{source}: --resume and --overwrite exclude each other")
    if resume:
        _check_resume(out, source, Path(resume))
    elif holds_run(out) and not overwrite:
        raise ConfigError(
            f"{source}: output.dir: {out} already holds a run; pass --resume {out} to "
            "continue it or --overwrite to delete it and start again"
        )


class RunClaim:
    """The claim of one run folder for the life of a run: its lock, and with ``--overwrite``
    the old run moved aside (``replaced``) until the new run's first checkpoint."""

    def __init__(self, out: Path, source: str, lock: RunLock) -> None:
        self.out, self.source, self.lock = out, source, lock
        self.replaced: Path | None = None

    def replace_old_run(self) -> None:
        """Move the run at ``out`` aside in one rename (nothing is lost if it fails) and lock
        a fresh, empty ``out`` in its place."""
        aside = _move_aside(self.out, self.source)
        old = self.lock
        old.moved(aside)
        try:
            self.lock = acquire(self.out, self.source)
        except BaseException:  # another writer took the name in between: leave it alone
            self.lock = old
            if not self.out.exists():
                os.replace(aside, self.out)
                old.moved(self.out)
            raise
        old.release()
        self.replaced = aside

    def checkpointed(self) -> str | None:
        """The new run has a checkpoint: delete the old one. Returns None, or one line saying
        the old run could not be deleted and where it was left (the new run is kept)."""
        aside, self.replaced = self.replaced, None
        if aside is None:
            return None
        try:
            _remove(aside)
        except OSError as exc:
            return (
                f"{self.source}: --overwrite: the old run, moved whole to {aside}, could not be "
                f"deleted ({exc.strerror or exc}); the new run is in {self.out}; delete {aside} "
                "by hand"
            )
        return None

    def _put_back(self) -> None:
        """The new run failed before its first checkpoint: restore the old run at ``out``."""
        aside, self.replaced = self.replaced, None
        if aside is None:
            return
        failed = self.out.with_name(f".{self.out.name}.failed-{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.out, failed)
            self.lock.moved(failed)
        os.replace(aside, self.out)
        with contextlib.suppress(OSError):
            _remove(failed)

    def release(self, *, failed: bool) -> None:
        """End the claim: a ``failed`` run that never checkpointed gives the old run back;
        then the lock is released (and a folder it created for nothing is removed)."""
        try:
            if failed:
                self._put_back()
            elif self.replaced is not None:  # ended well without a checkpoint (--stop-at 0)
                self.checkpointed()
        finally:
            self.lock.release()


def _move_aside(out: Path, source: str) -> Path:
    aside = out.with_name(f".{out.name}.replaced-{os.getpid()}")
    try:
        os.replace(out, aside)
    except OSError as exc:
        raise ConfigError(
            f"{source}: --overwrite: cannot move the old run {out} aside "
            f"({exc.strerror or exc}); nothing was deleted"
        ) from None
    return aside


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def claim_run_dir(
    out: Path, source: str, *, resume: str | os.PathLike[str] | None, overwrite: bool
) -> RunClaim:
    """Check the run directory, take its lock, check again under the lock, and with
    ``overwrite`` move an old run aside; the caller ends the claim with
    :meth:`RunClaim.release`.

    ConfigError naming the config's ``output.dir`` when it already holds a run and neither
    ``resume`` (the path to continue from) nor ``overwrite`` is set, or when both are; for a
    ``resume`` path that is not a run, or whose run would be written into another run; and
    when another process holds the folder (naming its pid and start time). A refusal writes
    nothing: a folder created only to hold the lock is removed again.
    """
    refuse_if_held(out, source)
    _check(out, source, resume, overwrite)  # refuse early, before touching anything
    # a file where the folder goes (only --overwrite gets here): aside like an old run
    file_aside = _move_aside(out, source) if out.exists() and not out.is_dir() else None
    try:
        lock = acquire(out, source)
    except BaseException:
        if file_aside is not None and not out.exists():
            os.replace(file_aside, out)
        raise
    claim = RunClaim(out, source, lock)
    claim.replaced = file_aside
    try:
        _check(out, source, resume, overwrite)  # again: another writer may have finished
        if overwrite and holds_run(out):
            claim.replace_old_run()
    except BaseException:
        lock.release()
        raise
    return claim
