"""Write a decoder's tensors as a GGUF file (F32 or F16) that our loader and llama.cpp read."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFWriter

from assay.atomic import TMP_MARK, file_mode, fsync_dir, fsync_file
from assay.errors import ConfigError
from assay.model.config import GGUF_GRANITE_KEYS, ModelConfig
from assay.model.families import FAMILIES
from assay.model.gguf import gguf_name, permute_qk
from assay.model.gguf_seal import placeholder_metadata, seal

_TYPES = {
    "F32": (GGMLQuantizationType.F32, np.float32),
    "F16": (GGMLQuantizationType.F16, np.float16),
}


def gguf_architecture(config: ModelConfig) -> str:
    """llama.cpp files Mistral under ``llama``; Qwen2, Qwen3 and Granite keep their own
    names."""
    return config.family.layout


def _metadata(writer: GGUFWriter, config: ModelConfig, arch: str) -> None:
    writer.add_block_count(config.num_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_heads)
    writer.add_head_count_kv(config.num_kv_heads)
    writer.add_key_length(config.head_dim)
    writer.add_value_length(config.head_dim)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_rope_freq_base(config.rope_theta)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    if config.family.scalars:
        for field, key in GGUF_GRANITE_KEYS.items():
            writer.add_float32(f"granite.{key}", float(getattr(config, field)))
    for key, value in (
        ("bos_token_id", config.bos_token_id),
        ("eos_token_id", config.eos_token_id),
        ("padding_token_id", config.pad_token_id),
    ):
        if value is not None:
            writer.add_uint32(f"tokenizer.ggml.{key}", int(value))


def finish_gguf(writer: Any, tmp: Path, target: Path, *, seal_key: str | None = None) -> None:
    """Write what ``writer`` (a ``gguf.GGUFWriter`` on ``tmp``) has queued, seal it under
    ``seal_key`` (when given; see :mod:`assay.model.gguf_seal`), fsync ``tmp`` and rename it
    to ``target``: a reader sees the old file or the whole new, sealed one."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if seal_key is not None:
        seal(tmp, seal_key)
    fsync_file(tmp)
    os.replace(tmp, target)
    fsync_dir(target.parent)


def write_gguf(
    path: str | os.PathLike[str],
    config: ModelConfig,
    tensors: Mapping[str, torch.Tensor],
    *,
    tensor_type: str = "F32",
    extra_metadata: Mapping[str, Any] | None = None,
    seal_key: str | None = None,
) -> Path:
    """Write ``tensors`` (our canonical names, HF layout) to ``path`` as GGUF.

    Q/K rows are permuted into llama.cpp's interleaved order for ``llama`` files, Llama-3 rope
    scaling becomes a ``rope_freqs`` tensor, and norms stay F32. The file is written to a temp
    name, fsynced and renamed, so a failed write never leaves a partial file at ``path``. With
    ``seal_key``, the file carries its own sha256 under that key (:mod:`assay.model.gguf_seal`).
    """
    if tensor_type not in _TYPES:
        raise ConfigError(f"GGUF tensor type {tensor_type!r} is not supported; use F32 or F16")
    qtype, np_dtype = _TYPES[tensor_type]
    target = Path(path)
    window = config.sliding_window
    if window is not None and window < config.max_position_embeddings:
        # no key of llama.cpp's llama or qwen2 holds a window: the file would attend over the
        # whole context, another model than the one exported
        raise ConfigError(
            f"{target}: a GGUF has no key for this model's sliding window ({window} of its "
            f"{config.max_position_embeddings} positions); export safetensors instead"
        )
    arch = gguf_architecture(config)
    if not FAMILIES[arch].gguf:
        raise ConfigError(
            f"{target}: assay writes no GGUF of {arch} (its reader could not read it back); "
            "export safetensors instead"
        )
    # a fresh name of our own: a user's file beside the target is never truncated or removed
    fd, name = tempfile.mkstemp(prefix=f".{target.name}{TMP_MARK}", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        os.chmod(tmp, file_mode())  # mkstemp's 0600 would make the export owner-only
        writer = GGUFWriter(str(tmp), arch)
        _metadata(writer, config, arch)
        extra = {**(extra_metadata or {}), **(placeholder_metadata(seal_key) if seal_key else {})}
        for key, value in extra.items():
            writer.add_key_value(key, value[0], value[1])
        if config.rope_scaling is not None:
            from assay.model.decoder import rope_inverse_frequencies

            plain = rope_inverse_frequencies(
                ModelConfig(**{**config.__dict__, "rope_scaling": None})
            )
            scaled = rope_inverse_frequencies(config)
            writer.add_tensor("rope_freqs.weight", (plain / scaled).numpy().astype(np.float32))
        elif config.rope_freq_divisors is not None:
            divisors = np.asarray(config.rope_freq_divisors, dtype=np.float32)
            writer.add_tensor("rope_freqs.weight", divisors)
        permuted = FAMILIES[arch].permuted_gguf
        for name, tensor in tensors.items():
            values = tensor.detach().to(torch.float32).cpu().numpy()
            if permuted and ".q_proj." in name:
                values = permute_qk(values, config.num_heads, inverse=False)
            elif permuted and ".k_proj." in name:
                values = permute_qk(values, config.num_kv_heads, inverse=False)
            if values.ndim == 1:  # norms and biases stay F32, as llama.cpp writes them
                writer.add_tensor(gguf_name(name), values.astype(np.float32))
            else:
                writer.add_tensor(gguf_name(name), values.astype(np_dtype), raw_dtype=qtype)
        finish_gguf(writer, tmp, target, seal_key=seal_key)
    except OSError as exc:  # numpy's short write carries no file name: name the export
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, f"cannot write ({exc.strerror or exc})", str(target)) from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return target
