"""What a checkpoint puts in a run folder, by name and kind, without torch: the checkpoint
writer (:mod:`assay.train.checkpoint.directory`) and the run-folder checks
(:mod:`assay.train.run.folder`) read this one list, so what a save may replace is exactly
what a save writes.

A checkpoint is a real folder named ``step-NNNNNN`` holding regular files with the names in
:data:`CHECKPOINT_FILES` and :data:`MANIFEST`, and nothing else; ``latest`` is a regular file
naming the newest complete one.
"""

from __future__ import annotations

import re
from pathlib import Path

LATEST = "latest"
MANIFEST = "manifest.json"
CHECKPOINT_FILES = (
    "trainables.safetensors",
    "optimizer.safetensors",
    "optimizer.json",
    "rng.safetensors",
    "rng.json",
    "scheduler.json",
    "cursor.json",
)
STEP_FOLDER = re.compile(r"step-[0-9]{6,}")


def step_dirname(step: int) -> str:
    """``step-000010`` for step 10 (at least six digits, so names sort by step)."""
    return f"step-{step:06d}"


def not_in_a_checkpoint(folder: Path) -> list[str]:
    """What in ``folder`` a checkpoint save never writes: a name outside the checkpoint's
    files, a symlink, a folder, a pipe. Empty for a checkpoint assay wrote; ``[folder's name]``
    when ``folder`` itself is a symlink or not a folder."""
    if folder.is_symlink() or not folder.is_dir():
        return [folder.name]
    written = {*CHECKPOINT_FILES, MANIFEST}
    return sorted(
        entry.name
        for entry in folder.iterdir()
        if entry.name not in written or entry.is_symlink() or not entry.is_file()
    )


def run_holding(path: Path) -> Path | None:
    """The run folder a checkpoint argument names: ``path`` itself when it holds ``latest`` (a
    run), its parent when ``path`` holds a checkpoint's manifest (a ``step-*`` folder); None
    when it is neither."""
    if (path / LATEST).is_file():
        return path
    if (path / MANIFEST).is_file():
        return path.parent
    return None
