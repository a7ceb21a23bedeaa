"""ModelConfig: the dimensions and knobs of a Llama-family decoder, from GGUF or HF config.json."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from assay.errors import ModelFileError, UnsupportedModelError

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2")
# The positive integers that size a decoder (the memory predictor reads these alone).
SIZE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "head_dim",
)


@dataclass(frozen=True)
class ModelConfig:
    """Everything the decoder needs to know; printable and comparable.

    ``architecture`` picks the family: ``llama`` (Llama, SmolLM2), ``mistral`` (Llama layout with
    an optional sliding window) or ``qwen2`` (bias on q, k and v). ``rope_scaling`` holds HF's
    Llama-3 parameters; ``rope_freq_divisors`` holds the per-frequency divisors that a GGUF file
    stores instead (``rope_freqs``). At most one of the two is set.
    """

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    sliding_window: int | None = None
    rope_scaling: Mapping[str, Any] | None = None
    rope_freq_divisors: tuple[float, ...] | None = field(default=None, repr=False)
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None

    def __post_init__(self) -> None:
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedModelError(
                f"architecture {self.architecture!r} is not supported; "
                f"expected one of {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        for name in SIZE_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ModelFileError(
                    f"config field {name} must be a positive integer, got {value!r}"
                )
        if self.num_heads % self.num_kv_heads:
            raise ModelFileError(
                f"config: num_heads {self.num_heads} is not a multiple of "
                f"num_kv_heads {self.num_kv_heads}"
            )

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view (divisors as a list, scaling as a plain dict)."""
        out = dataclasses.asdict(self)
        if self.rope_freq_divisors is not None:
            out["rope_freq_divisors"] = list(self.rope_freq_divisors)
        if self.rope_scaling is not None:
            out["rope_scaling"] = dict(self.rope_scaling)
        return out

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """Canonical tensor name -> shape (out, in) for every tensor the file must hold."""
        h, f, q, kv = self.hidden_size, self.intermediate_size, self.q_size, self.kv_size
        shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (self.vocab_size, h)}
        for i in range(self.num_layers):
            p = f"layers.{i}."
            shapes[p + "input_layernorm.weight"] = (h,)
            shapes[p + "self_attn.q_proj.weight"] = (q, h)
            shapes[p + "self_attn.k_proj.weight"] = (kv, h)
            shapes[p + "self_attn.v_proj.weight"] = (kv, h)
            shapes[p + "self_attn.o_proj.weight"] = (h, q)
            if self.attention_bias:
                shapes[p + "self_attn.q_proj.bias"] = (q,)
                shapes[p + "self_attn.k_proj.bias"] = (kv,)
                shapes[p + "self_attn.v_proj.bias"] = (kv,)
            shapes[p + "post_attention_layernorm.weight"] = (h,)
            shapes[p + "mlp.gate_proj.weight"] = (f, h)
            shapes[p + "mlp.up_proj.weight"] = (f, h)
            shapes[p + "mlp.down_proj.weight"] = (h, f)
        shapes["norm.weight"] = (h,)
        if not self.tie_word_embeddings:
            shapes["lm_head.weight"] = (self.vocab_size, h)
        return shapes


def _require(source: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in source:
        raise ModelFileError(f"{where}: missing required field {key!r}")
    return source[key]


def config_from_hf(hf: Mapping[str, Any], where: str) -> ModelConfig:
    """Build a ModelConfig from a parsed HF ``config.json``; ``where`` names the file in errors."""
    model_type = _require(hf, "model_type", where)
    if model_type not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedModelError(
            f"{where}: model_type {model_type!r} is not supported; "
            f"expected one of {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    hidden = int(_require(hf, "hidden_size", where))
    heads = int(_require(hf, "num_attention_heads", where))
    # transformers >= 5 folds rope_theta and rope_scaling into rope_parameters.
    rope = dict(hf.get("rope_parameters") or {})
    legacy_scaling = hf.get("rope_scaling")
    if legacy_scaling:
        rope.update(legacy_scaling)
    theta = float(rope.get("rope_theta", hf.get("rope_theta", 10000.0)))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", "llama3"):
        raise UnsupportedModelError(f"{where}: rope type {rope_type!r} is not supported")
    scaling = None
    if rope_type == "llama3":
        scaling = {
            "rope_type": "llama3",
            "factor": float(rope["factor"]),
            "low_freq_factor": float(rope.get("low_freq_factor", 1.0)),
            "high_freq_factor": float(rope.get("high_freq_factor", 4.0)),
            "original_max_position_embeddings": int(
                rope.get("original_max_position_embeddings", 8192)
            ),
        }
    window = hf.get("sliding_window") if hf.get("use_sliding_window", True) else None
    eos = hf.get("eos_token_id")
    return ModelConfig(
        architecture=model_type,
        vocab_size=int(_require(hf, "vocab_size", where)),
        hidden_size=hidden,
        intermediate_size=int(_require(hf, "intermediate_size", where)),
        num_layers=int(_require(hf, "num_hidden_layers", where)),
        num_heads=heads,
        num_kv_heads=int(hf.get("num_key_value_heads") or heads),
        head_dim=int(hf.get("head_dim") or hidden // heads),
        rope_theta=theta,
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        max_position_embeddings=int(hf.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        attention_bias=model_type == "qwen2" or bool(hf.get("attention_bias", False)),
        sliding_window=int(window) if window else None,
        rope_scaling=scaling,
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=eos[0] if isinstance(eos, list) else eos,
        pad_token_id=hf.get("pad_token_id"),
    )


def config_from_gguf(
    meta: Mapping[str, Any],
    where: str,
    *,
    has_output: bool,
    has_qkv_bias: bool,
    rope_freq_divisors: tuple[float, ...] | None,
) -> ModelConfig:
    """Build a ModelConfig from GGUF metadata (keys like ``llama.block_count``).

    GGUF stores Mistral as ``llama``; tied embeddings are inferred from the absence of
    ``output.weight``; the vocabulary size falls back to the token list's length.
    """
    arch = _require(meta, "general.architecture", where)
    if arch not in ("llama", "qwen2"):
        raise UnsupportedModelError(
            f"{where}: GGUF architecture {arch!r} is not supported; expected llama or qwen2"
        )

    def key(name: str) -> Any:
        return _require(meta, f"{arch}.{name}", where)

    hidden = int(key("embedding_length"))
    heads = int(key("attention.head_count"))
    kv_heads = int(meta.get(f"{arch}.attention.head_count_kv", heads))
    head_dim = int(meta.get(f"{arch}.attention.key_length") or hidden // heads)
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = meta.get(f"{arch}.vocab_size") or (len(tokens) if tokens is not None else None)
    if vocab is None:
        raise ModelFileError(f"{where}: cannot tell the vocabulary size (no vocab_size, no tokens)")
    theta = float(meta.get(f"{arch}.rope.freq_base", 10000.0))
    if not math.isfinite(theta) or theta <= 0:
        raise ModelFileError(f"{where}: {arch}.rope.freq_base must be positive, got {theta}")
    return ModelConfig(
        architecture=arch,
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(key("feed_forward_length")),
        num_layers=int(key("block_count")),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        rope_theta=theta,
        rms_norm_eps=float(meta.get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        max_position_embeddings=int(meta.get(f"{arch}.context_length", 2048)),
        tie_word_embeddings=not has_output,
        attention_bias=has_qkv_bias,
        rope_freq_divisors=rope_freq_divisors,
        bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
        eos_token_id=meta.get("tokenizer.ggml.eos_token_id"),
        pad_token_id=meta.get("tokenizer.ggml.padding_token_id"),
    )
