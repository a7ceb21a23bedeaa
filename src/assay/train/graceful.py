"""Graceful stop: SIGINT or SIGTERM during training finishes the current optimizer step, saves a
checkpoint there and ends the run; a second signal stops at once. Before training starts
(claiming the run folder, loading the model and data), :func:`stop_at_once` turns either
signal into :class:`Stopped`, so the run folder is released and the process says one line,
rather than dying by the signal with the folder left behind.

Checkpoints are written atomically (temp folder, fsync, rename), so even the immediate stop
keeps the last good checkpoint whole: at worst the step being saved is not there yet.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
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


class Stopped(KeyboardInterrupt):
    """A stop signal arrived before training started; ``signum`` names it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class AtOnce:
    """The handler :func:`stop_at_once` installs: a stop signal raises :class:`Stopped`, or,
    inside :meth:`deferred`, is kept and raised when that block ends."""

    def __init__(self) -> None:
        self._waiting = 0
        self._pending: int | None = None

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        if self._waiting:
            self._pending = self._pending or signum
            return
        raise Stopped(signum)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A block no stop interrupts: a signal that arrives inside it raises :class:`Stopped`
        once the block has ended. For imports of third-party code that swallows any exception
        raised inside it (torch's C code importing numpy clears it), leaving a module half
        imported and the stop lost."""
        self._waiting += 1
        try:
            yield
        finally:
            self._waiting -= 1
        if not self._waiting and self._pending is not None:
            raise Stopped(self._pending)


@contextlib.contextmanager
def stop_at_once() -> Iterator[AtOnce]:
    """While active (main thread only), SIGINT and SIGTERM raise :class:`Stopped`: the work
    in the block unwinds through its cleanup instead of the process ending by the signal.
    Yields the handler, whose :meth:`AtOnce.deferred` holds a stop until a block ends."""
    at_once = AtOnce()
    if threading.current_thread() is not threading.main_thread():
        yield at_once
        return
    previous = {sig: signal.signal(sig, at_once) for sig in STOP_SIGNALS}
    try:
        yield at_once
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
