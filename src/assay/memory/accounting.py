"""Owned-byte accounting, counted from the tensors a model and optimizer actually hold.

Every byte is read off a real tensor: each tensor's underlying storage is counted once
(deduplicated by device and ``untyped_storage().data_ptr()``), so tied weights, a head that
shares the embedding's packed bytes and views into one buffer are not double counted, and a
view keeps its whole storage alive, so the whole storage is counted. Meta tensors own nothing.

Ownership conventions:

- A module whose class has ``assay_adapter = True`` owns adapter tensors: every parameter and
  buffer in its subtree, except in the child modules named by its optional class attribute
  ``assay_base`` (a tuple of attribute names holding the wrapped frozen base layer), whose
  tensors stay base weights.
- A module whose class has ``assay_packed = True`` (``assay.storage.NF4Weight``) holds packed
  base storage: codes, block scales, nested scales, maps and offset.
- Every other tensor is a floating (dense) base tensor, whatever its dtype.
- ``dequant_tile_bytes`` is the largest ``dequant_tile_bytes`` any module declares: the bound on
  decoded weight that exists at once, transient rather than owned.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

if TYPE_CHECKING:
    from assay.storage.linear import WeightStore

KEYS = (
    "weight_bytes",
    "floating_base_bytes",
    "packed_base_bytes",
    "adapter_bytes",
    "frozen_adapter_bytes",
    "trainable_bytes",
    "grad_bytes",
    "optimizer_bytes",
    "dequant_tile_bytes",
)


def _storage_key(tensor: torch.Tensor) -> tuple[str, int] | None:
    if tensor.device.type == "meta":
        return None
    return (str(tensor.device), tensor.untyped_storage().data_ptr())


def _classified(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(kind, tensor) for every parameter and buffer; kind is adapter, packed or floating."""

    def walk(
        mod: nn.Module, in_adapter: bool, seen: set[int]
    ) -> Iterator[tuple[str, torch.Tensor]]:
        if id(mod) in seen:
            return
        seen.add(id(mod))
        if getattr(mod, "assay_adapter", False):
            in_adapter = True
        if in_adapter:
            kind = "adapter"
        elif getattr(mod, "assay_packed", False):
            kind = "packed"
        else:
            kind = "floating"
        for tensor in (*mod.parameters(recurse=False), *mod.buffers(recurse=False)):
            if tensor is not None:
                yield kind, tensor
        base_names = set(getattr(mod, "assay_base", ())) if in_adapter else set()
        for name, child in mod.named_children():
            yield from walk(child, in_adapter and name not in base_names, seen)

    yield from walk(module, False, set())


def owned_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Bytes owned by ``model`` (and ``optimizer``'s state), by role; see the module docstring.

    Guarantees: ``weight_bytes == floating_base_bytes + packed_base_bytes``; each storage is
    counted once across all keys except ``trainable_bytes``, which overlaps base and adapter
    bytes (it counts the parameters with ``requires_grad``).
    """
    totals = dict.fromkeys(KEYS, 0)
    seen: set[tuple[str, int]] = set()
    trainable_seen: set[tuple[str, int]] = set()
    for kind, tensor in _classified(model):
        key = _storage_key(tensor)
        if key is None:
            continue
        size = tensor.untyped_storage().nbytes()
        if tensor.requires_grad and key not in trainable_seen:
            trainable_seen.add(key)
            totals["trainable_bytes"] += size
        if key in seen:
            continue
        seen.add(key)
        if kind == "adapter":
            totals["adapter_bytes"] += size
            if not tensor.requires_grad:
                totals["frozen_adapter_bytes"] += size
        else:
            totals[f"{kind}_base_bytes"] += size
    totals["weight_bytes"] = totals["floating_base_bytes"] + totals["packed_base_bytes"]
    for param in model.parameters():
        if param.grad is not None:
            key = _storage_key(param.grad)
            if key is not None and key not in seen:
                seen.add(key)
                totals["grad_bytes"] += param.grad.untyped_storage().nbytes()
    if optimizer is not None:
        for state in optimizer.state.values():
            for value in state.values():
                key = _storage_key(value) if isinstance(value, torch.Tensor) else None
                if key is not None and key not in seen:
                    seen.add(key)
                    totals["optimizer_bytes"] += value.untyped_storage().nbytes()
    totals["dequant_tile_bytes"] = max(
        (int(getattr(m, "dequant_tile_bytes", 0)) for m in model.modules()), default=0
    )
    return totals


def packed_parameter_count(model: nn.Module) -> int:
    """Number of weight elements held in packed (NF4) stores, counted once per store."""
    # a module marked assay_packed is a weight store
    stores = {
        id(m): cast("WeightStore", m) for m in model.modules() if getattr(m, "assay_packed", False)
    }
    return sum(m.shape[0] * m.shape[1] for m in stores.values())
