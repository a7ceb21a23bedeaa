"""A pool of N >= 2 device slots that layers stream through, with prefetch and an owner check.

On CUDA a copy stream fills slots and events order the copy against the compute that reads
or last read the slot. On CPU a background thread fills them. Either way ``use(i)`` waits for
layer i's copy, then checks that the slot really holds layer i and raises otherwise: a slot
recycled too early is an error, never silently wrong numbers.

The CPU copies go through a copy engine (``submit(store, layer, buffer, done) -> Future``).
The default runs them in order on one thread; gates swap in ``assay_testing.copies``'s
delaying engine (``set_copy_engine``), which delays, tears and reorders copies so that a
missing wait or a reused busy slot shows as wrong numbers, as it would on a CUDA copy stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, cast

import torch

from assay.errors import AssayError
from assay.stream.layout import LayerLayout


class StreamError(AssayError):
    """The streaming engine found a slot holding the wrong layer."""


class Slot:
    def __init__(self, index: int, nbytes: int, device: torch.device) -> None:
        self.index = index
        self.buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)
        self.requested: int | None = None  # layer whose copy was issued into this slot
        self.loaded: int | None = None  # layer whose copy is known complete
        self.in_use = False
        self.pending: Future | None = None
        self.ready = torch.cuda.Event() if device.type == "cuda" else None
        self.released = torch.cuda.Event() if device.type == "cuda" else None
        self.last_used = -1


class CopyEngine(Protocol):
    """What CPU copies go through: :class:`ThreadCopies`, or an engine ``set_copy_engine`` sets."""

    def submit(
        self, store: Any, layer: int, buffer: torch.Tensor, done: Callable[[], None]
    ) -> Future: ...


class ThreadCopies:
    """The default CPU copy engine: copies run in issue order on one background thread."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(1, "assay-prefetch")

    def submit(self, store, layer: int, buffer: torch.Tensor, done: Callable[[], None]) -> Future:
        """Copy ``layer`` from ``store`` into ``buffer``, then call ``done`` (on the worker)."""

        def copy() -> None:
            store.read_into(layer, buffer, non_blocking=False)
            done()

        return self.executor.submit(copy)


class SlotPool:
    """Device slots sized for the largest layer; ``use(i)`` yields layer i's tensors."""

    # On CUDA the pool has a copy stream and every slot its events, on CPU a copy engine; each
    # is None on the other device, so the code of each path reads them as set.
    copies: CopyEngine | None

    def __init__(
        self, store, layouts: list[LayerLayout], buffers: int, device: torch.device
    ) -> None:
        if buffers < 2:
            raise AssayError(f"stream.buffers must be at least 2, got {buffers}")
        self.store, self.layouts, self.device = store, layouts, device
        self.slot_bytes = max(layout.nbytes for layout in layouts)
        self.slots = [Slot(k, self.slot_bytes, device) for k in range(buffers)]
        self.cuda = device.type == "cuda"
        self.copy_stream = torch.cuda.Stream(device) if self.cuda else None
        self.copies = None if self.cuda else ThreadCopies()
        self.clock = 0
        self.fetches = 0

    @property
    def device_bytes(self) -> int:
        """Bytes of base weights the pool keeps on the device: buffers x largest layer."""
        return len(self.slots) * self.slot_bytes

    def _holder(self, layer: int) -> Slot | None:
        return next((s for s in self.slots if s.requested == layer), None)

    def set_copy_engine(self, engine: CopyEngine) -> None:
        """Route CPU copies through ``engine`` (an object with ThreadCopies' ``submit``)."""
        if self.cuda:
            raise AssayError("a copy engine replaces CPU copies only; CUDA uses a copy stream")
        self.copies = engine

    def _victim(self) -> Slot:
        free = [s for s in self.slots if not s.in_use]
        if not free:
            raise StreamError("every stream slot is in use; increase stream.buffers")
        return min(free, key=lambda s: s.last_used)

    def prefetch(self, layer: int) -> Slot:
        """Start copying ``layer`` into a free slot unless a slot already has or gets it."""
        slot = self._holder(layer)
        if slot is not None:
            return slot
        slot = self._victim()
        self._wait(slot)  # an earlier copy into this slot must land before it is overwritten
        slot.requested, slot.loaded = layer, None
        self.fetches += 1
        if self.cuda:
            with torch.cuda.stream(self.copy_stream):
                cast(torch.cuda.Stream, self.copy_stream).wait_event(
                    cast(torch.cuda.Event, slot.released)
                )
                self.store.read_into(layer, slot.buffer, non_blocking=True)
                cast(torch.cuda.Event, slot.ready).record(self.copy_stream)
            slot.loaded = layer  # ordered by slot.ready, which every reader waits on
        else:
            slot.pending = cast(CopyEngine, self.copies).submit(
                self.store, layer, slot.buffer, lambda: setattr(slot, "loaded", layer)
            )
        return slot

    def _wait(self, slot: Slot) -> None:
        if slot.pending is not None:
            slot.pending.result()
            slot.pending = None
        if self.cuda and slot.requested is not None:
            torch.cuda.current_stream(self.device).wait_event(cast(torch.cuda.Event, slot.ready))

    def forget(self) -> None:
        """Drop what every slot holds, so each layer is copied afresh from the store: for a
        store whose tensors changed since (base weights that train, after an optimizer step)."""
        for slot in self.slots:
            if slot.in_use:
                raise StreamError(f"stream slot {slot.index} is in use and cannot be refilled")
            self._wait(slot)
            slot.requested = slot.loaded = None

    def buffer(self, layer: int) -> torch.Tensor:
        """The raw slot buffer that holds ``layer`` now; raises unless a slot holds it."""
        slot = self._holder(layer)
        if slot is None or slot.loaded != layer:
            raise StreamError(f"no stream slot holds layer {layer}")
        return slot.buffer

    @contextlib.contextmanager
    def use(self, layer: int, next_layer: int | None = None) -> Iterator[dict[str, torch.Tensor]]:
        """Layer ``layer``'s base tensors as typed views of a slot, valid inside the block.

        Starts prefetching ``next_layer`` into another slot before yielding.
        """
        slot = self.prefetch(layer)
        self._wait(slot)
        if slot.loaded != layer or slot.requested != layer:
            raise StreamError(
                f"stream slot {slot.index} holds layer {slot.loaded}, expected layer {layer}"
            )
        slot.in_use = True
        self.clock += 1
        slot.last_used = self.clock
        try:
            if next_layer is not None:
                self.prefetch(next_layer)
            yield self.layouts[layer].views(slot.buffer)
        finally:
            slot.in_use = False
            if self.cuda:
                cast(torch.cuda.Event, slot.released).record(torch.cuda.current_stream(self.device))
