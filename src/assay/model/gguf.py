"""Read a Llama-family GGUF file: config from metadata, tensors decoded to fp32 in HF layout."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType, quants

from assay.errors import ModelFileError, UnsupportedModelError
from assay.model.config import ModelConfig, config_from_gguf
from assay.model.gguf_header import GGUFHeader, TensorInfo, read_header

_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "embed_tokens.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")
# Metadata keys (after "<arch>.") that must hold integers; a string "2" is a corrupt file.
_INT_KEYS = (
    "block_count",
    "embedding_length",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "context_length",
    "vocab_size",
)


def _check_metadata_types(meta: dict, path: Path) -> None:
    """ModelFileError naming the key when a size field is not an integer."""
    arch = meta.get("general.architecture")
    for suffix in _INT_KEYS:
        key = f"{arch}.{suffix}"
        value = meta.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ModelFileError(
                f"{path}: metadata {key!r} must be an integer, got {type(value).__name__} {value!r}"
            )


def canonical_name(gguf_name: str) -> str | None:
    """Our parameter name for a GGUF tensor name, or None if it is not a parameter."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = _BLOCK.fullmatch(gguf_name)
    if match and match.group(2) in _LAYER_NAMES:
        return f"layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}"
    return None


def gguf_name(canonical: str) -> str:
    """The GGUF tensor name for one of our parameter names (inverse of canonical_name)."""
    for gguf, ours in _GLOBAL_NAMES.items():
        if ours == canonical:
            return gguf
    _, index, rest = canonical.split(".", 2)
    for gguf, ours in _LAYER_NAMES.items():
        if ours == rest:
            return f"blk.{index}.{gguf}"
    raise KeyError(canonical)


def permute_qk(weight: np.ndarray, heads: int, inverse: bool) -> np.ndarray:
    """llama.cpp's Q/K row interleave for ``llama`` files, or (``inverse``) its undoing.

    Within each head, llama.cpp row 2j+t holds HF row t*(d/2)+j (interleaved RoPE pairs).
    """
    rows = weight.shape[0]
    half = rows // heads // 2
    trailing = weight.shape[1:]
    if inverse:
        grouped = weight.reshape(heads, half, 2, *trailing).swapaxes(1, 2)
    else:
        grouped = weight.reshape(heads, 2, half, *trailing).swapaxes(1, 2)
    return np.ascontiguousarray(grouped.reshape(rows, *trailing))


class GGUFSource:
    """A validated GGUF model file. ``read(name)`` decodes one tensor at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.header: GGUFHeader = read_header(path)
        self._by_canonical: dict[str, TensorInfo] = {}
        for info in self.header.tensors.values():
            name = canonical_name(info.name)
            if name is not None:
                self._by_canonical[name] = info
        meta = self.header.metadata
        divisors = None
        if "rope_freqs.weight" in self.header.tensors:
            divisors = tuple(self._decode(self.header.tensors["rope_freqs.weight"]).tolist())
        _check_metadata_types(meta, path)
        try:
            self.config: ModelConfig = config_from_gguf(
                meta,
                str(path),
                has_output="lm_head.weight" in self._by_canonical,
                has_qkv_bias="layers.0.self_attn.q_proj.bias" in self._by_canonical,
                rope_freq_divisors=divisors,
            )
        except (ValueError, TypeError) as err:  # e.g. a float field stored as a string
            raise ModelFileError(f"{path}: metadata has the wrong type ({err})") from None
        except ModelFileError as err:  # config checks that do not know the file
            if str(path) in str(err):
                raise
            raise ModelFileError(f"{path}: {err}") from None
        self._permuted = self.config.family.permuted_gguf

    @property
    def names(self) -> list[str]:
        return list(self._by_canonical)

    def tensor_types(self) -> dict[str, int]:
        """How many tensors of each GGML type the file holds."""
        return dict(Counter(info.qtype.name for info in self.header.tensors.values()))

    def shape(self, name: str) -> tuple[int, ...]:
        return self._by_canonical[name].shape

    def _decode(self, info: TensorInfo) -> np.ndarray:
        raw = np.memmap(
            self.path, dtype=np.uint8, mode="r", offset=info.offset, shape=(info.nbytes,)
        )
        rows = info.n_elements // info.shape[-1]
        try:
            values = quants.dequantize(raw.reshape(rows, -1), info.qtype)
        except NotImplementedError:
            raise UnsupportedModelError(
                f"{self.path}: tensor {info.name!r} has type {info.qtype.name}, "
                "which gguf cannot dequantize"
            ) from None
        if info.qtype == GGMLQuantizationType.F32:
            values = np.array(values)  # detach from the memmap
        return values.astype(np.float32, copy=False).reshape(info.shape)

    def read(self, name: str) -> torch.Tensor:
        """Tensor ``name`` decoded to fp32 in HF layout (Q/K un-permuted for llama files)."""
        info = self._by_canonical.get(name)
        if info is None:
            raise ModelFileError(f"{self.path}: missing tensor {gguf_name(name)!r} ({name})")
        values = self._decode(info)
        if self._permuted and name.endswith(("q_proj.weight", "q_proj.bias")):
            values = permute_qk(values, self.config.num_heads, inverse=True)
        elif self._permuted and name.endswith(("k_proj.weight", "k_proj.bias")):
            values = permute_qk(values, self.config.num_kv_heads, inverse=True)
        return torch.from_numpy(values)
