"""assay.model: config, the one Llama-family decoder, and GGUF / safetensors import."""

from __future__ import annotations

from assay.lazy import lazy_attributes

# Imported on first use, so that a sub-module that needs no torch (the config) can be
# imported without loading torch through this package.
_LAZY = {
    "Decoder": "assay.model.decoder",
    "Fingerprint": "assay.model.loader",
    "ModelConfig": "assay.model.config",
    "load_with_fingerprint": "assay.model.loader",
    "open_source": "assay.model.loader",
}

__all__ = sorted(_LAZY)
__getattr__ = lazy_attributes(__name__, _LAZY)
