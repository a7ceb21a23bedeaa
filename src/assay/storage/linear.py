"""Frozen linear and embedding layers over a weight store, dequantized one row tile at a time.

Why not ``bitsandbytes.matmul_4bit``: it keeps the packed weight and quant state as plain
attributes on the autograd ctx. When the packed buffer is a recycled streaming slot, backward
then decodes whatever layer occupies the slot now and the gradients are silently wrong while
the forward stays exact. Here the store's tensors go through ``ctx.save_for_backward``: backward
decodes from exactly the tensors the forward used, and an in-place reuse of one of them raises
autograd's version-counter error instead of producing wrong numbers. Nothing dense is saved;
backward decodes each tile again.
"""

from __future__ import annotations

import threading
from typing import Protocol, cast

import torch
import torch.nn.functional as F
from torch import nn

DEFAULT_TILE_BYTES = 4 << 20
# A decoded tile is a few MiB that lives for one GEMM. Allocated fresh each time, glibc hands
# back pages it has just returned to the kernel, and faulting them in costs more than the
# decode; one buffer per thread, reused, keeps those pages resident.
_SCRATCH = threading.local()


class WeightStore(Protocol):
    """What the frozen layers read from their store: an ``nn.Module`` holding one frozen 2-D
    weight (``DenseWeight``, ``NF4Weight`` or a store a storage entry registers)."""

    @property
    def shape(self) -> tuple[int, int]: ...

    @property
    def row_align(self) -> int: ...

    @property
    def assay_packed(self) -> bool: ...

    def storage_tensors(self) -> tuple[torch.Tensor, ...]: ...

    def rows(
        self,
        start: int,
        stop: int,
        dtype: torch.dtype,
        tensors: tuple[torch.Tensor, ...] | None = None,
    ) -> torch.Tensor: ...

    def gather(self, index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor: ...

    def workspace_bytes(self, tile_rows: int) -> int: ...

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor: ...


class PackedWeightStore(WeightStore, Protocol):
    """A store with ``assay_packed`` set, whose ``rows`` can decode into a caller's buffer."""

    def rows(
        self,
        start: int,
        stop: int,
        dtype: torch.dtype,
        tensors: tuple[torch.Tensor, ...] | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor: ...


def _scratch(rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    """A contiguous CPU tensor of shape ``(rows, cols)`` and ``dtype``, uninitialised.

    Guarantees: it is a view of this thread's buffer for ``dtype``, so the next call on this
    thread with the same dtype may overwrite it; use it before then. The buffer grows to the
    largest request seen and is kept for the thread's life (at most one tile per dtype).
    """
    buffers: dict[torch.dtype, torch.Tensor] = _SCRATCH.__dict__.setdefault("buffers", {})
    need = rows * cols
    buffer = buffers.get(dtype)
    if buffer is None or buffer.numel() < need:
        buffer = torch.empty(need, dtype=dtype)
        buffers[dtype] = buffer
    return buffer[:need].view(rows, cols)


def tile_rows_for(store: WeightStore, tile_bytes: int) -> int:
    """Rows per tile: as many as fit ``tile_bytes`` of fp32, a multiple of the store's alignment."""
    rows, cols = store.shape
    align = store.row_align
    fit = max(tile_bytes // (cols * 4), 1)
    return min(max(fit // align, 1) * align, rows)


def _tile(store: WeightStore, start: int, stop: int, dtype: torch.dtype, tensors) -> torch.Tensor:
    """Rows [start, stop) of the store's weight in ``dtype``, valid until the next tile.

    A packed store on CPU decodes into this thread's scratch (``_scratch``), so the tile
    must be consumed before the next one is decoded, as every caller below does. Not while
    grad mode is on: a backward run with ``create_graph`` would keep the tile in the graph
    for the second-order pass, and later decodes would overwrite it unseen.
    """
    if store.assay_packed and tensors[0].device.type == "cpu" and not torch.is_grad_enabled():
        out = _scratch(stop - start, store.shape[1], dtype)
        # only packed stores are handed a buffer to decode into
        return cast(PackedWeightStore, store).rows(start, stop, dtype, tensors, out=out)
    return store.rows(start, stop, dtype, tensors)


class _TiledMatmul(torch.autograd.Function):
    """y = x W^T + b with W decoded tile by tile; the gradient flows to x only."""

    @staticmethod
    def forward(ctx, x, store, tile, bias, *tensors):
        rows = store.shape[0]
        bias = bias.to(x.dtype) if bias is not None else None
        if tile >= rows:
            out = F.linear(x, _tile(store, 0, rows, x.dtype, tensors), bias)
        else:
            out = x.new_empty(*x.shape[:-1], rows)
            for start in range(0, rows, tile):
                stop = min(start + tile, rows)
                part = bias[start:stop] if bias is not None else None
                weight = _tile(store, start, stop, x.dtype, tensors)
                out[..., start:stop] = F.linear(x, weight, part)
        ctx.save_for_backward(*tensors)
        ctx.store, ctx.tile, ctx.dtype = store, tile, x.dtype
        return out

    @staticmethod
    def backward(ctx, grad_out):
        tensors = ctx.saved_tensors
        store, tile = ctx.store, ctx.tile
        rows, cols = store.shape
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_out = grad_out.to(ctx.dtype)
            if tile >= rows:
                grad_x = grad_out @ _tile(store, 0, rows, ctx.dtype, tensors)
            else:
                flat = grad_out.reshape(-1, rows)
                grad_x = flat.new_zeros(flat.shape[0], cols)
                for start in range(0, rows, tile):
                    stop = min(start + tile, rows)
                    weight = _tile(store, start, stop, ctx.dtype, tensors)
                    grad_x.addmm_(flat[:, start:stop], weight)
                grad_x = grad_x.reshape(*grad_out.shape[:-1], cols)
        return (grad_x, None, None, None, *([None] * len(tensors)))


class FrozenLinear(nn.Module):
    """Drop-in for a frozen ``nn.Linear`` whose weight lives in a store (NF4 or bf16).

    Guarantees: ``forward(x)`` equals ``F.linear(x, W, b)`` with ``W`` the store's dense weight in
    ``x.dtype``, computed tile by tile (at most ``dequant_tile_bytes`` of decoded weight at once);
    the gradient reaches ``x`` and never the weight or bias. Use ``dequantized_weight()`` when a
    dense copy is really needed (adapter initialisation).
    """

    assay_storage = True

    def __init__(
        self,
        store: WeightStore,
        bias: torch.Tensor | None = None,
        *,
        tile_bytes: int = DEFAULT_TILE_BYTES,
    ) -> None:
        super().__init__()
        self.store = store
        self.out_features, self.in_features = store.shape
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)
        self.tile_rows = tile_rows_for(store, tile_bytes)

    @property
    def dequant_tile_bytes(self) -> int:
        """Bound on the bytes of decoded weight (and scales) one tile holds."""
        return self.store.workspace_bytes(self.tile_rows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tensors = self.store.storage_tensors()
        return _TiledMatmul.apply(x, self.store, self.tile_rows, self.bias, *tensors)

    def dequantized_weight(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The whole dense weight (allocates out_features x in_features)."""
        return self.store.dequantize(dtype)

    def extra_repr(self) -> str:
        kind = type(self.store).__name__
        return (
            f"in={self.in_features}, out={self.out_features}, store={kind}, tile={self.tile_rows}"
        )


class FrozenEmbedding(nn.Module):
    """Drop-in for a frozen ``nn.Embedding``: decodes only the looked-up rows, once each.

    The store may be shared with a tied ``FrozenLinear`` head (one copy of the packed bytes).
    Output dtype is the dtype the dense embedding had.
    """

    assay_storage = True

    def __init__(self, store: WeightStore, *, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.store = store
        self.num_embeddings, self.embedding_dim = store.shape
        self.dtype = dtype

    @property
    def dequant_tile_bytes(self) -> int:
        """Decoded rows are transient and scale with the lookup; one row's bound is reported."""
        return self.store.workspace_bytes(1)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.store.gather(input_ids, self.dtype)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, store={type(self.store).__name__}"
