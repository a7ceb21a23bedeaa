"""Tiny random models of every supported family, built from transformers configs.

Nothing is downloaded: each model is created from a config with a fixed seed, saved as an HF
safetensors directory and, on request, as a GGUF file through our writer, so the Q/K
permutation is exercised in both directions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

FAMILIES = ("qwen2", "mistral", "llama3", "qwen3", "granite", "olmo2", "phi3", "gemma3")

# the model_type of each tiny family whose name is not its own
ARCHITECTURE = {"llama3": "llama", "gemma3": "gemma3_text"}

_COMMON: dict[str, Any] = {
    "vocab_size": 320,
    "hidden_size": 64,
    "intermediate_size": 160,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def hf_config(family: str, **overrides: Any):
    """A transformers config for one tiny family (``qwen2``, ``mistral``, ``llama3``, ``qwen3``,
    ``granite``, ``olmo2`` or ``phi3``; Qwen3's heads are 24 wide, so q is wider than the hidden
    size; Granite's four scalars are far from 1, as granite-3's are; Phi-3's q, k and v are one
    projection, as are its gate and up, and its sliding window of 32 binds on longer rows;
    Gemma 3 (``gemma3``, model_type gemma3_text) has a sliding layer and a full one, each with
    its own rope theta, a window of 32 and an attention scale other than head_dim's)."""
    from transformers import (
        Gemma3TextConfig,
        GraniteConfig,
        LlamaConfig,
        MistralConfig,
        Olmo2Config,
        Phi3Config,
        Qwen2Config,
        Qwen3Config,
    )

    kwargs = {**_COMMON, **overrides}
    if family == "qwen2":
        return Qwen2Config(**kwargs, tie_word_embeddings=True)
    if family == "mistral":
        return MistralConfig(**kwargs, sliding_window=4096, tie_word_embeddings=False)
    if family == "llama3":
        scaling = {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
            "rope_theta": 500000.0,
        }
        return LlamaConfig(**kwargs, rope_parameters=scaling, tie_word_embeddings=False)
    if family == "qwen3":
        return Qwen3Config(**{"head_dim": 24, **kwargs}, tie_word_embeddings=True)
    if family == "granite":
        scalars = {
            "embedding_multiplier": 12.0,
            "residual_multiplier": 0.22,
            "attention_multiplier": 0.125,  # a power of two, as granite-3's 1/64 and 1/128
            "logits_scaling": 8.0,
        }
        return GraniteConfig(**{**scalars, **kwargs}, tie_word_embeddings=True)
    if family == "olmo2":
        return Olmo2Config(**kwargs, tie_word_embeddings=False)
    if family == "phi3":
        # transformers' default pad id (32000) is outside a tiny vocabulary; a window of 32
        # binds on longer prompts, as Phi-3-mini's 2047 does on long ones
        phi3 = {"pad_token_id": 0, "sliding_window": 32}
        return Phi3Config(**{**phi3, **kwargs}, tie_word_embeddings=False)
    if family == "gemma3":
        layers = kwargs.get("num_hidden_layers", _COMMON["num_hidden_layers"])
        gemma = {
            "head_dim": 16,
            "query_pre_attn_scalar": 24,
            "sliding_window": 32,
            "layer_types": [("full_attention", "sliding_attention")[i % 2] for i in range(layers)],
            "pad_token_id": 0,
        }
        return Gemma3TextConfig(**{**gemma, **kwargs}, tie_word_embeddings=True)
    raise ValueError(f"unknown tiny family {family!r}; expected one of {FAMILIES}")


def build_reference(family: str, seed: int = 0, **overrides: Any):
    """The transformers model with random weights (std 0.1 so that logits are not flat)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config(family, **overrides), dtype=torch.float32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            else:
                param.normal_(0.0, 0.1)
    return model.eval()


def family_of(architecture: str) -> str:
    """The tiny family that builds a model of ``architecture`` (a model_type assay reads)."""
    return next((f for f, a in ARCHITECTURE.items() if a == architecture), architecture)


def writes_gguf(family: str) -> bool:
    """Whether assay writes and reads a GGUF of the tiny ``family`` (not of OLMo 2, Phi-3 or
    Gemma 3)."""
    from assay.model.families import FAMILIES

    architecture = ARCHITECTURE.get(family, family)
    return FAMILIES[FAMILIES[architecture].layout].gguf


def save_tiny(
    family: str, directory: Path, seed: int = 0, gguf: bool = True, **overrides: Any
) -> dict[str, Path]:
    """Save a tiny model as safetensors (``hf``) and, where assay writes the family's GGUF, as
    GGUF (``gguf``); returns their paths.

    ``overrides`` change the config (e.g. ``num_hidden_layers=6``).
    """
    from assay.model.gguf_export import write_gguf
    from assay.model.safetensors import SafetensorsSource

    model = build_reference(family, seed, **overrides)
    suffix = "".join(f"-{k}{v}" for k, v in sorted(overrides.items()))
    hf_dir = directory / f"{family}{suffix}-hf"
    model.save_pretrained(hf_dir)
    paths = {"hf": hf_dir}
    if gguf and writes_gguf(family):
        source = SafetensorsSource(hf_dir)
        tensors = {name: source.read(name) for name in source.config.expected_shapes()}
        paths["gguf"] = write_gguf(directory / f"{family}{suffix}.gguf", source.config, tensors)
    return paths


def edit_config(folder: Path, **changes: Any) -> None:
    """Give the config.json of the model folder ``folder`` the ``changes``, its weights left
    as they are: a rope theta goes where transformers 5 wrote it, and read as Llama a Granite's
    scalars are nulled (a Llama file may not ask for them)."""
    import json

    from assay.model.hf_fields import GRANITE_SCALARS

    path = Path(folder) / "config.json"
    config = json.loads(path.read_text())
    if "rope_theta" in changes and isinstance(config.get("rope_parameters"), dict):
        config["rope_parameters"]["rope_theta"] = changes.pop("rope_theta")
    if changes.get("model_type") == "llama":
        changes = {**dict.fromkeys(GRANITE_SCALARS), **changes}
    path.write_text(json.dumps({**config, **changes}))


def llama_config(**overrides: Any):
    """A small Llama ``ModelConfig`` (vocab 64, hidden 32, FFN 48, 2 layers, 4 query and 2 KV
    heads of 8, tied head) for tests that build a Decoder directly; ``overrides`` replace
    fields."""
    from assay.model import ModelConfig

    fields: dict[str, Any] = {
        "architecture": "llama",
        "vocab_size": 64,
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_layers": 2,
        "num_heads": 4,
        "num_kv_heads": 2,
        "head_dim": 8,
        "tie_word_embeddings": True,
    }
    return ModelConfig(**{**fields, **overrides})


def smollm2_config(layers: int = 30, **overrides: Any):
    """SmolLM2-135M's architecture (hidden 576, FFN 1536, 9/3 heads, head_dim 64, vocab 49152,
    tied head, rope theta 1e5) at any depth."""
    return llama_config(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_layers=layers,
        num_heads=9,
        num_kv_heads=3,
        head_dim=64,
        rope_theta=100000.0,
        **overrides,
    )


def smollm2_shaped(layers: int, seed: int = 0):
    """A random, frozen Decoder with SmolLM2's architecture (see ``smollm2_config``) at any
    depth; weights N(0, 0.02) from ``seed``."""
    from assay.model import Decoder

    config = smollm2_config(layers)
    torch.manual_seed(seed)
    model = Decoder(config)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.02)
    return model.requires_grad_(False)
