"""A fault-injecting copy engine for the streaming slot pool on CPU.

The default CPU engine copies each layer in order on one thread, so a copy usually lands long
before anything reads the slot and a missing wait goes unseen. ``DelayingCopies`` behaves like
an unsynchronised copy stream: each copy starts after a random delay on one of several worker
threads (so copies finish out of issue order) and writes its slot in chunks with pauses in
between (so a reader can see a torn mix of two layers). A pool that waits for every copy before
use, and never overwrites a slot a layer is computing from, gives the same numbers as with the
default engine; one that skips either shows wrong numbers.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import torch


class DelayingCopies:
    """Copy engine with random start delays, reordering across ``workers`` threads and torn,
    chunked writes. Delays are drawn from ``seed`` in issue order (thread timing still varies).
    """

    def __init__(
        self,
        seed: int = 0,
        *,
        workers: int = 3,
        min_delay_s: float = 0.002,
        max_delay_s: float = 0.008,
        chunks: int = 4,
    ) -> None:
        self.executor = ThreadPoolExecutor(workers, "assay-delayed-copy")
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        # The floor keeps a prefetched copy late even when a layer computes in under a
        # millisecond, so a read that skips the wait finds stale bytes most of the time.
        self.min_delay_s, self.max_delay_s, self.chunks = min_delay_s, max_delay_s, chunks
        self.copies = 0

    def submit(self, store, layer: int, buffer: torch.Tensor, done: Callable[[], None]) -> Future:
        """Copy ``layer`` into ``buffer`` late and in pieces, then call ``done``."""
        with self.lock:
            delay = self.rng.uniform(self.min_delay_s, self.max_delay_s)
            pauses = [
                self.rng.uniform(0.0, self.max_delay_s / self.chunks) for _ in range(self.chunks)
            ]
            self.copies += 1

        def copy() -> None:
            time.sleep(delay)
            staged = torch.empty_like(buffer)
            store.read_into(layer, staged, non_blocking=False)
            for piece, source, pause in zip(
                buffer.chunk(self.chunks), staged.chunk(self.chunks), pauses, strict=True
            ):
                piece.copy_(source)
                time.sleep(pause)
            done()

        return self.executor.submit(copy)
