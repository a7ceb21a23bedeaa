"""The checkpoint argument of ``assay export`` and ``assay generate --checkpoint``: a run
folder (its ``latest`` is followed) or one of its ``step-*`` checkpoint folders."""

from __future__ import annotations

from pathlib import Path

from assay.errors import AssayError
from assay.train.checkpoint.layout import LATEST, MANIFEST, run_holding


def checkpoint_run(path: Path) -> Path:
    """The run folder ``path`` names. AssayError naming ``path`` itself when it is neither a
    run folder nor a checkpoint folder (never a file beside it that the user did not name)."""
    run = run_holding(path)
    if run is None:
        raise AssayError(
            f"{path}: not a run folder (no '{LATEST}') or a checkpoint folder (no {MANIFEST}); "
            "expected a folder assay train wrote, or one of its step-* folders"
        )
    return run
