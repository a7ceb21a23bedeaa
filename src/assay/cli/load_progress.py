"""A status line on stderr while something slow loads, so the CLI is never silent for long.

:func:`load_progress` shows ``assay: loading <what> ... 3 s`` on stderr once the block has run
longer than ``after`` seconds (about one), updates the count each second on a terminal, and
ends the line with the total when the block finishes; a block that raises (an error, Ctrl-C)
never claims it loaded: the line is erased on a terminal and ends in "stopped" elsewhere.
Nothing goes to stdout, so ``--json`` output stays one JSON document. It shows when stderr is a
terminal, or when ``ASSAY_PROGRESS=1`` asks for it (logs, tests); ``ASSAY_PROGRESS=0``
silences it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

ENV = "ASSAY_PROGRESS"


def wanted(stream: TextIO | None = None) -> bool:
    """Whether to show load status: ASSAY_PROGRESS=1/0 decides, else a terminal stderr."""
    setting = os.environ.get(ENV, "").strip()
    if setting in ("0", "1"):
        return setting == "1"
    target = stream if stream is not None else sys.stderr
    return bool(getattr(target, "isatty", lambda: False)())


@contextlib.contextmanager
def load_progress(
    what: str, *, enabled: bool = True, after: float = 1.0, stream: TextIO | None = None
) -> Iterator[None]:
    """Show a status line on stderr for a block that takes longer than ``after`` seconds."""
    if not enabled or not wanted(stream):
        yield
        return
    out = stream if stream is not None else sys.stderr
    tty = bool(getattr(out, "isatty", lambda: False)())
    started = time.monotonic()
    done = threading.Event()
    shown = threading.Event()
    lock = threading.Lock()

    def tick() -> None:
        if done.wait(after):
            return
        with lock:
            if done.is_set():
                return
            out.write(f"assay: loading {what} ...")
            out.flush()
            shown.set()
        while tty and not done.wait(1.0):
            with lock:
                if not done.is_set():
                    out.write(f"\rassay: loading {what} ... {time.monotonic() - started:.0f} s")
                    out.flush()

    thread = threading.Thread(target=tick, name="assay-load-status", daemon=True)
    thread.start()
    loaded = False
    try:
        yield
        loaded = True
    finally:
        with lock:
            done.set()
            if shown.is_set():
                seconds = time.monotonic() - started
                if loaded:
                    out.write(f"\rassay: loaded {what} in {seconds:.1f} s\n")
                elif tty:  # erase it: the error (or "interrupted") line that follows stands alone
                    out.write("\r\x1b[K")
                else:
                    out.write(f" stopped after {seconds:.1f} s\n")
                out.flush()
        thread.join()
