"""Which tensors of a decoder layer stream, and where each sits inside a layer's byte block.

A layer's *base* tensors are every parameter and buffer of the frozen base, whatever storage
holds it (dense weights, NF4 packed bytes and scales, norms, biases). Inside an adapter module
(``assay_adapter = True``) only the children it names in ``assay_base`` are base; the adapter's
own tensors (LoRA A/B, DoRA magnitude, TinyLoRA's fixed buffers) stay resident.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

ALIGN = 64  # bytes; every tensor starts on a cache line inside its block


def base_tensors(layer: nn.Module, prefix: str = "") -> dict[str, torch.Tensor]:
    """Dotted name -> tensor for the layer's base parameters and buffers, in module order."""
    found: dict[str, torch.Tensor] = {}
    for name, tensor in [
        *layer.named_parameters(recurse=False),
        *layer.named_buffers(recurse=False),
    ]:
        if tensor is not None and not getattr(layer, "assay_adapter", False):
            found[prefix + name] = tensor
    children = dict(layer.named_children())
    if getattr(layer, "assay_adapter", False):
        children = {k: v for k, v in children.items() if k in getattr(layer, "assay_base", ())}
    for name, child in children.items():
        found.update(base_tensors(child, f"{prefix}{name}."))
    return found


@dataclass(frozen=True)
class TensorSlot:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    offset: int
    nbytes: int
    trainable: bool


@dataclass(frozen=True)
class LayerLayout:
    """Byte layout of one layer's base tensors inside a contiguous block."""

    entries: tuple[TensorSlot, ...]
    nbytes: int

    @classmethod
    def of(cls, tensors: dict[str, torch.Tensor]) -> LayerLayout:
        entries, offset = [], 0
        for name, tensor in tensors.items():
            size = tensor.numel() * tensor.element_size()
            entries.append(
                TensorSlot(
                    name,
                    tuple(tensor.shape),
                    tensor.dtype,
                    offset,
                    size,
                    bool(tensor.requires_grad),
                )
            )
            offset += -(-size // ALIGN) * ALIGN
        return cls(tuple(entries), offset)

    def views(self, block: torch.Tensor) -> dict[str, torch.Tensor]:
        """Typed views of ``block`` (uint8, at least ``nbytes`` long), one per tensor."""
        out = {}
        for e in self.entries:
            raw = block[e.offset : e.offset + e.nbytes]
            out[e.name] = raw.view(e.dtype).reshape(e.shape)
        return out

    def describe(self) -> list[list]:
        """A JSON-serialisable description (for cache keys and shard metadata)."""
        return [[e.name, list(e.shape), str(e.dtype), e.offset, e.nbytes] for e in self.entries]
