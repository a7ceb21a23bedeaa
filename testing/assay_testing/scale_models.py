"""Random-weight models of published shapes (``assay.model.shapes``), written one tensor at a
time so that a model larger than this machine's memory can still be written.

The folder is an HF safetensors directory (``config.json`` from transformers' own config
class, so transformers loads it, and one ``model.safetensors``) plus ``fingerprint.json``,
written last: a folder whose fingerprint matches the shape, seed and writer version is reused,
and anything else is rebuilt in a temp folder and renamed into place.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import torch

from assay.atomic import fsync_file
from assay.model.config import ModelConfig
from assay.model.shapes import named_shape, parameter_count

WRITER_VERSION = 1
WEIGHT_STD = 0.02  # the init std of the published Llama configs (initializer_range)


def default_cache() -> Path:
    root = os.environ.get("ASSAY_CACHE") or Path.home() / ".cache" / "assay"
    return Path(root) / "scale-models"


def hf_config_json(config: ModelConfig) -> dict:
    """transformers' LlamaConfig for ``config``, as the dict its config.json holds."""
    from transformers import LlamaConfig

    rope = {"rope_type": "default", "rope_theta": config.rope_theta}
    if config.rope_scaling is not None:
        rope = {**dict(config.rope_scaling), "rope_theta": config.rope_theta}
    hf = LlamaConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        head_dim=config.head_dim,
        max_position_embeddings=config.max_position_embeddings,
        rms_norm_eps=config.rms_norm_eps,
        tie_word_embeddings=config.tie_word_embeddings,
        rope_parameters=rope,
        bos_token_id=1,
        eos_token_id=2,
    )
    return hf.to_dict()


def _hf_names(config: ModelConfig) -> Iterator[tuple[str, tuple[int, ...]]]:
    for name, shape in config.expected_shapes().items():
        yield (name if name == "lm_head.weight" else f"model.{name}"), shape


def _tensor(name: str, shape: tuple[int, ...], seed: int, index: int) -> torch.Tensor:
    """Tensor ``index`` of the file: norms are ones, every other weight N(0, 0.02) from its
    own generator, so any one tensor can be rebuilt without the others."""
    if name.endswith("norm.weight"):
        return torch.ones(shape)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + index)
    return torch.randn(shape, generator=generator) * WEIGHT_STD


def fingerprint(config: ModelConfig, seed: int) -> dict:
    return {
        "writer_version": WRITER_VERSION,
        "seed": seed,
        "config": config.to_dict(),
        "parameters": parameter_count(config),
    }


def write_random_model(config: ModelConfig, folder: Path, *, seed: int = 0) -> Path:
    """``folder`` holding a random fp32 model of ``config``; peak memory is one tensor.

    Guarantees: the same config and seed give the same bytes; a folder with a matching
    ``fingerprint.json`` is returned untouched; a torn write is never reused.
    """
    expected = fingerprint(config, seed)
    marker = folder / "fingerprint.json"
    try:
        if json.loads(marker.read_text()) == expected:
            return folder
    except (OSError, ValueError):
        pass
    staging = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    (staging / "config.json").write_text(json.dumps(hf_config_json(config), indent=2))
    entries, offset = {}, 0
    names = list(_hf_names(config))
    for name, shape in names:
        size = 4
        for n in shape:
            size *= n
        entries[name] = {
            "dtype": "F32",
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    header = json.dumps({"__metadata__": {"format": "pt"}, **entries}).encode()
    header += b" " * (-len(header) % 8)
    weights = staging / "model.safetensors"
    with weights.open("wb") as out:
        out.write(struct.pack("<Q", len(header)) + header)
        for index, (name, shape) in enumerate(names):
            out.write(_tensor(name, shape, seed, index).numpy().tobytes())
    fsync_file(weights)
    (staging / "fingerprint.json").write_text(json.dumps(expected, indent=2))
    fsync_file(staging / "fingerprint.json")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(staging, folder)
    return folder


def random_model(
    name: str, layers: int | None = None, *, seed: int = 0, cache: Path | None = None
) -> Path:
    """The cached random model of published shape ``name`` at ``layers`` depth."""
    config = named_shape(name, layers)
    root = cache or default_cache()
    return write_random_model(config, root / f"{name}-L{config.num_layers}-s{seed}", seed=seed)
