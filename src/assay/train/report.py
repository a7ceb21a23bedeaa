"""Metrics where users look: TensorBoard event files mirroring ``metrics.jsonl``.

``metrics.jsonl`` stays the source of truth (resume and ``assay status`` read it); the event
files are a view of the same numbers, written with ``torch.utils.tensorboard`` when the
``tensorboard`` package is installed.

Guarantees: a missing or broken tensorboard install, and an events folder that cannot be
written, are refused before anything loads (:func:`check_tensorboard`,
:func:`check_events_folder`). An error while writing, in this thread or in the writer's
background thread (a full disk), never escapes as a traceback: the :class:`Reporter` records
the first one, asks the run to stop (it then saves a checkpoint at that step, as a signal
does) and the run ends with that error on one line (:meth:`Reporter.raise_if_failed`).
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from assay.errors import AssayError

EVENTS_DIR = "tensorboard"
INSTALL = "pip install tensorboard (or the assay[tensorboard] extra)"
SCALARS = ("loss", "lr", "grad_norm", "tokens_per_s", "eval_loss")
OPTION = "--report-to tensorboard"


def _why(err: BaseException) -> str:
    """An error as words: OSError's strerror (its path may be bytes), else the message."""
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return str(err) or type(err).__name__


def check_tensorboard() -> None:
    """AssayError, saying how to install it, when the tensorboard package is missing or does
    not import (checked before anything loads, so a long run never fails at its first step)."""
    import importlib.util

    if importlib.util.find_spec("tensorboard") is None:
        raise AssayError(f"{OPTION} needs the tensorboard package: {INSTALL}")
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except Exception as err:  # a broken install fails in many ways; all mean the same
        raise AssayError(
            f"{OPTION}: the tensorboard package is installed but does not import "
            f"({type(err).__name__}: {err}); reinstall it: {INSTALL}"
        ) from None


def check_events_folder(run_dir: Path) -> None:
    """AssayError naming the folder when ``run_dir/tensorboard`` cannot hold event files: a
    file in its place, or a folder in which no file can be created. Leaves nothing behind."""
    events = Path(run_dir) / EVENTS_DIR
    probe_in = events if events.exists() else Path(run_dir)
    if events.exists() and not events.is_dir():
        raise AssayError(f"{OPTION}: {events}: exists and is not a folder; move it away")
    try:
        with tempfile.TemporaryFile(dir=probe_in):
            pass
    except OSError as err:
        raise AssayError(f"{OPTION}: {probe_in}: cannot write event files ({_why(err)})") from None


class Reporter:
    """Writes each metrics line's scalars (and its ``metrics`` entries, under ``train/``) at
    its step; never raises. ``error`` holds the first failure, after which it writes nothing
    and :attr:`failed` is True (the run stops at the next step boundary)."""

    def __init__(self, run_dir: Path) -> None:
        self.events = Path(run_dir) / EVENTS_DIR
        self.error: str | None = None
        self.step: int | None = None
        self._writer: Any = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    def open(self) -> None:
        """Start the writer (creates the events folder and file); a failure is recorded."""

        def start() -> None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.events))

        self._guard(start)

    def _guard(self, action, *args: Any) -> None:
        if self.failed:
            return
        try:
            action(*args)
        except Exception as err:
            self.fail(err)

    def fail(self, err: BaseException) -> None:
        """Record ``err`` as the reporter's error (the first one wins)."""
        if self.error is None:
            self.error = f"{self.events}: cannot write event files ({_why(err)})"

    def __call__(self, line: dict[str, Any]) -> None:
        self.step = line.get("step", self.step)
        self._guard(self._write, line)

    def _write(self, line: dict[str, Any]) -> None:
        values = {name: line.get(name) for name in SCALARS}
        values.update(line.get("metrics") or {})
        for name, value in values.items():
            if isinstance(value, int | float) and math.isfinite(value):
                self._writer.add_scalar(f"train/{name}", value, line["step"])
        self._writer.flush()  # surfaces a failure of the background thread now

    def close(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                writer.close()
            except Exception as err:
                self.fail(err)

    def raise_if_failed(self, config: str, run_dir: Path, *, finished: bool = False) -> None:
        """AssayError (one line: what failed, where the run stopped, how to resume)."""
        if self.error is None:
            return
        if finished:
            raise AssayError(
                f"{OPTION}: {self.error}; the run itself finished and is saved in {run_dir}"
            )
        where = "" if self.step is None else f"; stopped after step {self.step} (checkpointed)"
        raise AssayError(
            f"{OPTION}: {self.error}{where}; resume with: assay train {config} --resume {run_dir}"
        )


@contextlib.contextmanager
def _thread_errors_to(reporter: Reporter) -> Iterator[None]:
    """For the block, an exception that ends one of tensorboard's writer threads goes to
    ``reporter`` instead of a traceback on stderr; other threads' go where they went."""
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if type(args.thread).__module__.startswith("tensorboard.") and args.exc_value:
            reporter.fail(args.exc_value)
        else:
            previous(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous


@contextlib.contextmanager
def tensorboard_report(run_dir: Path) -> Iterator[Reporter]:
    """A :class:`Reporter` for ``run_dir/tensorboard``, flushed and closed when the block
    ends; AssayError saying how to install the package when it is missing or broken."""
    check_tensorboard()
    reporter = Reporter(run_dir)
    with _thread_errors_to(reporter):
        reporter.open()
        try:
            yield reporter
        finally:
            reporter.close()
