"""Published model shapes by name, so memory and time can be asked about without the weights.

Each entry is the ``ModelConfig`` of a released checkpoint (its ``config.json`` values), not
its weights: ``assay estimate --shape`` plans from it and the test machinery builds random
models of it. No torch here.
"""

from __future__ import annotations

import dataclasses

from assay.errors import ConfigError
from assay.model.config import ModelConfig

SHAPES: dict[str, ModelConfig] = {
    "smollm2-135m": ModelConfig(
        architecture="llama",
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_layers=30,
        num_heads=9,
        num_kv_heads=3,
        head_dim=64,
        rope_theta=100000.0,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    ),
    "tinyllama-1.1b": ModelConfig(
        architecture="llama",
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_layers=22,
        num_heads=32,
        num_kv_heads=4,
        head_dim=64,
        max_position_embeddings=2048,
    ),
    "llama-3.2-3b": ModelConfig(
        architecture="llama",
        vocab_size=128256,
        hidden_size=3072,
        intermediate_size=8192,
        num_layers=28,
        num_heads=24,
        num_kv_heads=8,
        head_dim=128,
        rope_theta=500000.0,
        max_position_embeddings=131072,
        tie_word_embeddings=True,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    ),
    "llama-2-7b": ModelConfig(
        architecture="llama",
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=11008,
        num_layers=32,
        num_heads=32,
        num_kv_heads=32,
        head_dim=128,
        max_position_embeddings=4096,
    ),
}


# deeper than any published decoder (Llama-3.1-405B has 126 layers), small enough that every
# size computed from it stays an exact integer
MAX_LAYERS = 1024


def named_shape(name: str, layers: int | None = None) -> ModelConfig:
    """The config of the published shape ``name``, with ``layers`` decoder layers if given
    (the same width at another depth); ConfigError naming the known shapes otherwise."""
    if name not in SHAPES:
        raise ConfigError(f"unknown model shape {name!r}; known shapes: {', '.join(SHAPES)}")
    config = SHAPES[name]
    if layers is None:
        return config
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= MAX_LAYERS:
        raise ConfigError(f"layers must be an integer in 1..{MAX_LAYERS}, got {layers!r}")
    return dataclasses.replace(config, num_layers=layers)


def parameter_count(config: ModelConfig) -> int:
    """Every parameter the checkpoint holds (a tied head counted once)."""
    total = 0
    for shape in config.expected_shapes().values():
        size = 1
        for n in shape:
            size *= n
        total += size
    return total
