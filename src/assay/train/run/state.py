"""``run-state.json``: what a run directory's last training process is doing or did.

Written atomically by the main process when training starts (``running``, with its pid and
the pid's start time in clock ticks since boot, so a reused pid is never taken for the run's
process) and when it ends: ``finished`` (reached ``steps``), ``stopped`` (a signal,
``--stop-at`` or a failed reporter, with the reason) or ``failed`` (an exception, named on one
line). A process killed outright leaves
``running`` behind; ``assay status`` then sees that neither the run's lock is held nor its
process (pid and start time) alive, and reports it as failed.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from assay.atomic import atomic_write_bytes
from assay.train.run.lock import start_ticks

RUN_STATE = "run-state.json"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_state(run_dir: Path, **fields: Any) -> None:
    """Replace the run's state file with ``fields`` plus the time (atomically)."""
    body = {**fields, "updated": _now()}
    atomic_write_bytes(Path(run_dir) / RUN_STATE, (json.dumps(body, indent=1) + "\n").encode())


@contextlib.contextmanager
def recorded_state(
    run_dir: Path, enabled: bool, target: int, step: Callable[[], int]
) -> Iterator[dict[str, Any]]:
    """Mark the run ``running`` for the block, then ``finished``, ``stopped`` or ``failed``.

    The block may set ``"reason"`` in the yielded dict (why it stopped early); nothing is
    written when ``enabled`` is False (ranks other than the main one)."""
    outcome: dict[str, Any] = {}
    started = _now()
    if enabled:
        write_state(
            run_dir,
            state="running",
            pid=os.getpid(),
            start_ticks=start_ticks(os.getpid()),
            started=started,
            step=step(),
            steps=target,
        )
    try:
        yield outcome
    except BaseException as exc:
        if enabled:
            interrupted = isinstance(exc, KeyboardInterrupt)
            write_state(
                run_dir,
                state="stopped" if interrupted else "failed",
                reason="interrupted" if interrupted else failure_line(exc),
                started=started,
                step=step(),
                steps=target,
            )
        raise
    if enabled:
        done = step() >= target
        write_state(
            run_dir,
            state="finished" if done else "stopped",
            reason=None if done else outcome.get("reason", "stop_at"),
            started=started,
            step=step(),
            steps=target,
        )


def failure_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line for the state file (``assay status`` prints it as a
    field): a library's multi-line message keeps its first line, cut at ``limit`` characters."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= limit else text[: limit - 3] + "..."
