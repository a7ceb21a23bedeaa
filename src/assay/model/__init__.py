"""assay.model: config, the one Llama-family decoder, and GGUF / safetensors import."""

from assay.model.config import ModelConfig
from assay.model.decoder import Decoder
from assay.model.loader import Fingerprint, load_with_fingerprint, open_source

__all__ = ["Decoder", "Fingerprint", "ModelConfig", "load_with_fingerprint", "open_source"]
