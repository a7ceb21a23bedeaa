"""assay.storage: frozen base weights held as float32, bf16, nf4 or nf4_double_quant.

``apply_storage(layer, storage)`` swaps each ``nn.Linear`` for a ``FrozenLinear`` over a weight
store; ``quantize_embeddings(model, storage)`` does the same for the embedding and (tied) head.
NF4 bytes come from bitsandbytes and are decoded per use into a bounded row tile.
"""

from __future__ import annotations

from assay.lazy import lazy_attributes

# Imported on first use, so that importing the package loads no torch.
_LAZY = {
    "DEFAULT_TILE_BYTES": "assay.storage.linear",
    "DenseWeight": "assay.storage.dense",
    "FrozenEmbedding": "assay.storage.linear",
    "FrozenLinear": "assay.storage.linear",
    "NF4Weight": "assay.storage.nf4",
    "STORAGES": "assay.settings.storages",
    "apply_storage": "assay.storage.apply",
    "check_storage": "assay.storage.apply",
    "make_store": "assay.storage.apply",
    "quantize_embeddings": "assay.storage.apply",
    "register_storage_hook": "assay.storage.apply",
}

__all__ = sorted(_LAZY)
__getattr__ = lazy_attributes(__name__, _LAZY)
