"""Swap dense frozen projections (and embeddings) for stored ones, in place."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import cast

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from assay.settings.storages import storage as registered_storage
from assay.storage.linear import DEFAULT_TILE_BYTES, FrozenEmbedding, FrozenLinear, WeightStore

StorageHook = Callable[[str, nn.Module, str], None]
_HOOKS: OrderedDict[int, StorageHook] = OrderedDict()


def register_storage_hook(hook: StorageHook) -> RemovableHandle:
    """Call ``hook(phase, module, storage)`` around every storage conversion.

    ``phase`` is "before" or "after"; conversions are ``apply_storage`` and
    ``quantize_embeddings`` (whose module is the whole model). Used by gates to sample memory
    at each layer of a load. Returns a handle whose ``remove()`` unregisters the hook.
    """
    handle = RemovableHandle(_HOOKS)
    _HOOKS[handle.id] = hook
    return handle


def _fire(phase: str, module: nn.Module, storage: str) -> None:
    for hook in list(_HOOKS.values()):
        hook(phase, module, storage)


def check_storage(storage: str) -> str:
    """``storage`` if it names a storage, else ConfigError listing the valid names."""
    return registered_storage(storage).name


def make_store(weight: torch.Tensor, storage: str) -> WeightStore:
    """A weight store for a 2-D ``weight`` under a storage that converts (not float32): the
    registry entry's store class with its options (a dtype option names a torch dtype)."""
    entry = registered_storage(storage)
    options = {
        key: getattr(torch, value) if key == "dtype" else value
        for key, value in entry.store_options
    }
    return entry.store_class()(weight, **options)


def _children_to_convert(module: nn.Module):
    """(parent, name, linear) for every nn.Linear below ``module``, skipping adapters' own."""
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            yield module, name, child
        elif not getattr(child, "assay_adapter", False):
            yield from _children_to_convert(child)


def apply_storage(
    module: nn.Module, storage: str, *, tile_bytes: int = DEFAULT_TILE_BYTES
) -> nn.Module:
    """Replace every ``nn.Linear`` inside ``module`` by a ``FrozenLinear`` over ``storage``.

    Bias is kept (frozen). "float32" changes nothing. Returns ``module``, or its replacement
    when ``module`` is itself an ``nn.Linear``. The dense weights are released as each linear is
    swapped, so converting layer by layer never holds more than one dense layer.
    """
    check_storage(storage)
    _fire("before", module, storage)
    if not registered_storage(storage).keeps_parameters:
        if isinstance(module, nn.Linear):
            module = _convert(module, storage, tile_bytes)
        else:
            for parent, name, linear in list(_children_to_convert(module)):
                setattr(parent, name, _convert(linear, storage, tile_bytes))
    _fire("after", module, storage)
    return module


def _convert(linear: nn.Linear, storage: str, tile_bytes: int) -> FrozenLinear:
    return FrozenLinear(make_store(linear.weight, storage), linear.bias, tile_bytes=tile_bytes)


def quantize_embeddings(
    model: nn.Module, storage: str, *, tile_bytes: int = DEFAULT_TILE_BYTES
) -> nn.Module:
    """Store ``model.embed_tokens`` and ``model.lm_head`` under ``storage``, in place.

    A tied head (its weight is the embedding's) shares the embedding's store: the packed bytes
    exist once. An untied head gets its own store. "float32" changes nothing.
    """
    check_storage(storage)
    _fire("before", model, storage)
    if not registered_storage(storage).keeps_parameters:
        # still the decoder's own dense modules: embeddings are stored once, at load
        embedding, head = cast(nn.Embedding, model.embed_tokens), cast(nn.Linear, model.lm_head)
        tied = head.weight.untyped_storage().data_ptr() == (
            embedding.weight.untyped_storage().data_ptr()
        )
        store = make_store(embedding.weight, storage)
        model.embed_tokens = FrozenEmbedding(store, dtype=embedding.weight.dtype)
        head_store = store if tied else make_store(head.weight, storage)
        model.lm_head = FrozenLinear(head_store, head.bias, tile_bytes=tile_bytes)
    _fire("after", model, storage)
    return model
