"""Graceful stop: SIGINT or SIGTERM during training finishes the current optimizer step, saves a
checkpoint there and ends the run; a second signal stops at once.

Checkpoints are written atomically (temp folder, fsync, rename), so even the immediate stop
keeps the last good checkpoint whole: at worst the step being saved is not there yet.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class GracefulStop:
    """A context manager and a predicate: while active, the first SIGINT/SIGTERM is recorded
    (``signum``, and calling the object returns True) and the second raises KeyboardInterrupt.
    Outside the main thread, where Python cannot install handlers, it records nothing."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def __call__(self) -> bool:
        """True once a stop was asked for."""
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        """128 + the signal number (130 for SIGINT, 143 for SIGTERM), the shell's convention;
        a rank that stopped because another rank was signalled exits as if sent SIGTERM, the
        signal torchrun forwards."""
        return 128 + (self.signum or signal.SIGTERM)

    @property
    def name(self) -> str:
        """The signal's name, or what stopped a rank that received none."""
        return signal.Signals(self.signum).name if self.signum else "another rank was signalled"

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt  # the second signal: stop now
        self.signum = signum

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()
