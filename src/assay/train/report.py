"""Metrics where users look: TensorBoard event files mirroring ``metrics.jsonl``.

``metrics.jsonl`` stays the source of truth (resume and ``assay status`` read it); the event
files are a view of the same numbers, written with ``torch.utils.tensorboard`` when the
``tensorboard`` package is installed.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from assay.errors import AssayError

EVENTS_DIR = "tensorboard"
INSTALL = "pip install tensorboard (or the assay[tensorboard] extra)"
SCALARS = ("loss", "lr", "grad_norm", "tokens_per_s", "eval_loss")


def check_tensorboard() -> None:
    """AssayError, saying how to install it, when the tensorboard package is missing (checked
    before anything loads, so a long run never fails at its first step for it)."""
    import importlib.util

    if importlib.util.find_spec("tensorboard") is None:
        raise AssayError(f"--report-to tensorboard needs the tensorboard package: {INSTALL}")


@contextlib.contextmanager
def tensorboard_report(run_dir: Path) -> Iterator[Callable[[dict[str, Any]], None]]:
    """A reporter writing each metrics line's scalars (and its ``metrics`` entries, under
    ``train/``) at its step to ``run_dir/tensorboard``; AssayError saying how to install the
    package when it is missing. The writer is flushed and closed when the block ends."""
    check_tensorboard()
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(Path(run_dir) / EVENTS_DIR))

    def report(line: dict[str, Any]) -> None:
        values = {name: line.get(name) for name in SCALARS}
        values.update(line.get("metrics") or {})
        for name, value in values.items():
            if isinstance(value, int | float) and math.isfinite(value):
                writer.add_scalar(f"train/{name}", value, line["step"])

    try:
        yield report
    finally:
        writer.close()
