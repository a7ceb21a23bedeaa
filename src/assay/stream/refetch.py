"""Streaming that keeps activations: the backward fetches each layer's weights again instead of
recomputing the layer.

While layer i runs forward, every tensor autograd saves that is a view of layer i's slot is
packed as a reference (layer, dtype, shape, stride, offset) instead of the tensor. When the
backward unpacks such a reference, layer i is fetched into a slot again (layer i - 1 prefetched)
and the same view is rebuilt over that slot. Every other saved tensor (activations, adapter
weights, anything computed from the weights) is kept as it is, so the backward runs the
resident model's own autograd graph on the same bytes: gradients are bitwise the resident ones,
and no layer is computed twice. The price is the resident activation memory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from assay.stream.pool import SlotPool


@dataclass(frozen=True)
class SlotRef:
    """Where a saved tensor sat inside its layer's slot, enough to rebuild the same view."""

    layer: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int  # storage offset, in elements of ``dtype``


class KeptActivations:
    """Saved-tensor hooks that swap slot views for references and fetch them back in backward.

    Guarantees: a reference always resolves to the bytes of the layer it was packed from (the
    pool's owner check raises otherwise); at most one layer is held for the backward at a time,
    and it is released by ``release()`` (called at the start of every forward).
    """

    def __init__(self, pool: SlotPool) -> None:
        self.pool = pool
        self._packing: tuple[int, int] | None = None  # (layer, slot storage address)
        # (layer, its pool.use block, its slot buffer): held from the first unpack of a layer
        # until the backward moves to another, so each unpack is a lookup, not a pool scan.
        self._held: tuple[int, contextlib.AbstractContextManager, torch.Tensor] | None = None

    @contextlib.contextmanager
    def saving(self, layer: int, views: dict[str, torch.Tensor]) -> Iterator[None]:
        """Inside the block, tensors saved from ``layer``'s slot are packed as references."""
        address = next(iter(views.values())).untyped_storage().data_ptr()
        self._packing = (layer, address)
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                yield
        finally:
            self._packing = None

    def release(self) -> None:
        """Give back the slot the backward holds, if any."""
        if self._held is not None:
            _, use, _ = self._held
            self._held = None
            use.__exit__(None, None, None)

    def _pack(self, tensor: torch.Tensor) -> Any:
        packing = self._packing
        if (
            packing is not None
            and tensor.device.type == self.pool.device.type
            and tensor.untyped_storage().data_ptr() == packing[1]
        ):
            shape, stride = tuple(tensor.shape), tuple(tensor.stride())
            # torch types the offset "int | SymInt"; only a traced tensor's is symbolic
            return SlotRef(packing[0], tensor.dtype, shape, stride, tensor.storage_offset())  # type: ignore[arg-type]
        return tensor

    def _unpack(self, packed: Any) -> torch.Tensor:
        if not isinstance(packed, SlotRef):
            return packed
        block = self._fetch(packed.layer).view(packed.dtype)
        return block.as_strided(packed.shape, packed.stride, packed.offset)

    def _fetch(self, layer: int) -> torch.Tensor:
        if self._held is None or self._held[0] != layer:
            self.release()
            use = self.pool.use(layer, layer - 1 if layer > 0 else None)
            use.__enter__()
            self._held = (layer, use, self.pool.buffer(layer))
        return self._held[2]
