"""``assay.load``: a model file loaded with its frozen base held in the storage asked for.

Storage sits above the model in the dependency order, so the model loader only offers a
per-layer hook and this module hands it the storage backend.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from assay.model.decoder import Decoder
from assay.model.loader import Fingerprint, LayerHook, load_with_fingerprint


def load_stored(
    path: str | os.PathLike[str],
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device | None = "cpu",
    storage: str = "float32",
    quantize_embeddings_too: bool = False,
    then: LayerHook | None = None,
) -> tuple[Decoder, Fingerprint]:
    """Like :func:`load`, and also return the fingerprint. ``then(layer)`` runs on each layer
    once storage has packed it, before the next layer is decoded (``device`` None: no move at
    the end, for a ``then`` that moves each layer's tensors elsewhere)."""
    # Imported here so that float32 loads never pay for importing bitsandbytes.
    from assay.settings.storages import storage as registered_storage
    from assay.storage import apply_storage, check_storage, quantize_embeddings

    check_storage(storage)
    packs = not registered_storage(storage).keeps_parameters

    def each_layer(layer: nn.Module) -> None:
        if packs:
            apply_storage(layer, storage)
        if then is not None:
            then(layer)

    return load_with_fingerprint(
        path,
        dtype=dtype,
        device=device,
        layer_hook=each_layer if packs or then is not None else None,
        model_hook=(lambda model: quantize_embeddings(model, storage))
        if quantize_embeddings_too
        else None,
    )


def load(
    path: str | os.PathLike[str],
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    storage: str = "float32",
    quantize_embeddings: bool = False,
) -> Decoder:
    """Load a GGUF file or HF safetensors directory as a frozen ``Decoder``.

    ``storage`` picks how frozen projections are held: float32, bf16, nf4 or nf4_double_quant
    (each layer is packed as soon as it is decoded). ``quantize_embeddings`` also packs the
    embeddings and the tied head. The model's ``fingerprint`` attribute holds source and
    canonical sha256 and sizes.
    """
    model, _ = load_stored(
        path,
        dtype=dtype,
        device=device,
        storage=storage,
        quantize_embeddings_too=quantize_embeddings,
    )
    return model
