"""assay.storage: frozen base weights held as float32, bf16, nf4 or nf4_double_quant.

``apply_storage(layer, storage)`` swaps each ``nn.Linear`` for a ``FrozenLinear`` over a weight
store; ``quantize_embeddings(model, storage)`` does the same for the embedding and (tied) head.
NF4 bytes come from bitsandbytes and are decoded per use into a bounded row tile.
"""

from assay.storage.apply import (
    apply_storage,
    check_storage,
    make_store,
    quantize_embeddings,
    register_storage_hook,
)
from assay.storage.dense import DenseWeight
from assay.storage.linear import DEFAULT_TILE_BYTES, FrozenEmbedding, FrozenLinear
from assay.storage.nf4 import NF4Weight
from assay.storage_registry import STORAGES

__all__ = [
    "DEFAULT_TILE_BYTES",
    "STORAGES",
    "DenseWeight",
    "FrozenEmbedding",
    "FrozenLinear",
    "NF4Weight",
    "apply_storage",
    "check_storage",
    "make_store",
    "quantize_embeddings",
    "register_storage_hook",
]
