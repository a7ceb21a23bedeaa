"""ModelConfig: the dimensions and knobs of a Llama-family decoder, from GGUF or HF config.json."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import numbers
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from assay.errors import ModelFileError, UnsupportedModelError
from assay.model.families import FAMILIES, GGUF_NAMES, LAYER_KINDS, NAMES, Family
from assay.model.hf_fields import (
    ABSENT,
    GRANITE_SCALARS,
    check_refused_fields,
    gemma3_rope,
    rope_parameters,
)

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
# The largest value each number may take, checked before anything is sized by it: well past
# every published model (Llama-3 405B has 126 layers and hidden 16,384; Gemma 3 a 262,144-token
# vocabulary), far below what would exhaust memory building a shape table or a memory plan.
LIMITS: dict[str, float] = {
    "vocab_size": 1 << 22,
    "hidden_size": 1 << 17,
    "intermediate_size": 1 << 19,
    "num_layers": 1 << 10,
    "num_heads": 1 << 10,
    "num_kv_heads": 1 << 10,
    "head_dim": 1 << 11,
    "max_position_embeddings": 1 << 24,
    "sliding_window": 1 << 24,
    "original_max_position_embeddings": 1 << 24,
    "rope_theta": 1e12,
    "rms_norm_eps": 1.0,
    "factor": 1024.0,
    "low_freq_factor": 1024.0,
    "high_freq_factor": 1024.0,
    "rope_freq_divisors": 1e12,
    # Granite's scalars (granite-3.x: embeddings x12, residual branches x0.22, attention
    # scaled by 1/128, logits divided by 8): far beyond any published one, well below overflow
    "embedding_multiplier": 1e4,
    "residual_multiplier": 1e4,
    "attention_multiplier": 1e4,
    "logits_scaling": 1e4,
    # Gemma 3's attention scale is query_pre_attn_scalar^-0.5 (256 in every published one)
    "query_pre_attn_scalar": 1 << 20,
}
# transformers' defaults where a family's config.json leaves a key out (the rest are the
# family entries', assay.model.families)
QWEN2_WINDOW = 4096
QWEN2_WINDOW_LAYERS = 28
GEMMA3_QUERY_PRE_ATTN_SCALAR = 256
GEMMA3_WINDOW = 4096
# every n-th Gemma 3 layer is full attention, the others sliding, when layer_types is absent
GEMMA3_WINDOW_PATTERN = 6
# rope theta of Gemma 3's full-attention and sliding layers when config.json leaves them out
GEMMA3_THETA = {"full_attention": 1_000_000.0, "sliding_attention": 10_000.0}
# ModelConfig reals that may be None (the family does not have them), and the LIMITS key of each
_OPTIONAL_REALS = ("rope_local_theta", "query_pre_attn_scalar")
_LIMIT_OF = {"rope_local_theta": "rope_theta"}


@dataclass(frozen=True)
class ModelConfig:
    """Everything the decoder needs to know; printable and comparable.

    ``architecture`` picks the family: ``llama`` (Llama, SmolLM2), ``mistral`` (Llama layout with
    an optional sliding window), ``qwen2`` (bias on q, k and v), ``qwen3`` (``qk_norm``: each
    head of q and k RMS-normalised before RoPE), ``olmo2`` (``post_norm``: each branch's output
    RMS-normalised before its residual add, no norm on its input; the whole q and k projections
    RMS-normalised before RoPE), ``phi3`` (``fused_projections``: q, k and v in one
    ``qkv_proj``, gate and up in one ``gate_up_proj``; an optional window on every layer) or
    ``granite`` (embeddings times
    ``embedding_multiplier``, each residual branch times ``residual_multiplier``, attention
    scores times ``attention_multiplier`` instead of head_dim^-0.5, logits divided by
    ``logits_scaling``). ``rope_scaling`` holds HF's
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
    qk_norm: bool = False
    embedding_multiplier: float = 1.0
    residual_multiplier: float = 1.0
    attention_multiplier: float | None = None  # None: head_dim^-0.5
    logits_scaling: float = 1.0
    sliding_window: int | None = None
    rope_scaling: Mapping[str, Any] | None = None
    rope_freq_divisors: tuple[float, ...] | None = field(default=None, repr=False)
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    # per layer, full_attention or sliding_attention (Gemma 3); None: one kind for every layer
    layer_types: tuple[str, ...] | None = None
    rope_local_theta: float | None = None  # the sliding layers' rope theta (Gemma 3)
    query_pre_attn_scalar: int | None = None  # attention scaled by its ^-0.5 (Gemma 3)

    def __post_init__(self) -> None:
        if self.architecture not in NAMES:
            raise UnsupportedModelError(
                f"architecture {self.architecture!r} is not supported; "
                f"expected one of {', '.join(NAMES)}"
            )
        for name in SIZE_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 < value <= LIMITS[name]:
                raise ModelFileError(
                    f"config field {name} must be a positive integer up to "
                    f"{LIMITS[name]:,.0f}, got {value!r}"
                )
        if self.num_heads % self.num_kv_heads:
            raise ModelFileError(
                f"config: num_heads {self.num_heads} is not a multiple of "
                f"num_kv_heads {self.num_kv_heads}"
            )
        if self.head_dim % 2:
            # RoPE rotates pairs of features: an odd head has a feature with no partner, and
            # transformers refuses it too
            raise ModelFileError(
                f"config: head_dim must be even (RoPE rotates pairs of features), "
                f"got {self.head_dim}"
            )
        # every other number a decoder computes with: a zero or negative one trains on NaN
        scaling = dict(self.rope_scaling or {})
        positive = {
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "sliding_window": self.sliding_window,
            **{key: getattr(self, key) for key in GRANITE_SCALARS},
            **{f"rope_scaling.{k}": v for k, v in scaling.items() if k != "rope_type"},
            **{f"rope_freq_divisors[{i}]": v for i, v in enumerate(self.rope_freq_divisors or ())},
            "rope_local_theta": self.rope_local_theta,
            "query_pre_attn_scalar": self.query_pre_attn_scalar,
        }
        optional = ("sliding_window", "attention_multiplier", *_OPTIONAL_REALS)
        for name, value in positive.items():
            if name in optional and value is None:
                continue
            limit = LIMITS[_LIMIT_OF.get(name, name).split("[")[0].removeprefix("rope_scaling.")]
            if not _finite(value) or not 0 < value <= limit:
                raise ModelFileError(
                    f"config field {name} must be a positive number up to {limit:g}, got {value!r}"
                )
        self._check_layer_types()

    def _check_layer_types(self) -> None:
        kinds = self.layer_types
        if kinds is None:
            return
        if len(kinds) != self.num_layers or not set(kinds) <= set(LAYER_KINDS):
            raise ModelFileError(
                f"config field layer_types must name full_attention or sliding_attention for "
                f"each of the {self.num_layers} layers, got {kinds!r}"
            )
        if "sliding_attention" in kinds and self.sliding_window is None:
            raise ModelFileError(
                "config: layer_types names sliding_attention layers but sliding_window is none"
            )

    @property
    def layer_kinds(self) -> tuple[str | None, ...]:
        """Each layer's attention kind (full_attention or sliding_attention), or None for every
        layer of a model with one kind (``sliding_window``, if set, binds them all)."""
        return self.layer_types or (None,) * self.num_layers

    def window_of(self, kind: str | None) -> int | None:
        """The sliding window of a layer of ``kind`` (:attr:`layer_kinds`), or None."""
        return None if kind == "full_attention" else self.sliding_window

    def rope_theta_of(self, kind: str | None) -> float:
        """The rope theta of a layer of ``kind``: Gemma 3's sliding layers have their own."""
        if kind == "sliding_attention" and self.rope_local_theta is not None:
            return self.rope_local_theta
        return self.rope_theta

    @property
    def attention_scale(self) -> float:
        """The attention scores' scale: query_pre_attn_scalar^-0.5 (Gemma 3), Granite's
        attention_multiplier, or head_dim^-0.5."""
        if self.query_pre_attn_scalar is not None:
            return self.query_pre_attn_scalar**-0.5
        if self.attention_multiplier is not None:
            return self.attention_multiplier
        return self.head_dim**-0.5

    @property
    def family(self) -> Family:
        """The family entry of ``architecture`` (assay.model.families)."""
        return FAMILIES[self.architecture]

    @property
    def sandwich_norm(self) -> bool:
        """Each branch's input and output are normalised (Gemma 3)."""
        return self.family.sandwich_norm

    @property
    def norm_weight_in_fp32(self) -> bool:
        """RMSNorm multiplies by its weight in fp32, then casts back (OLMo 2, Gemma 3)."""
        return self.family.norm_weight_in_fp32

    @property
    def norm_offset(self) -> float:
        """What RMSNorm adds to its stored weight: 1 for Gemma's x * (1 + w), else 0."""
        return 1.0 if self.family.offset_norm else 0.0

    @property
    def scaled_embeddings(self) -> bool:
        """The embeddings are multiplied by sqrt(hidden_size) (Gemma 3)."""
        return self.family.scaled_embeddings

    @property
    def activation(self) -> str:
        """The MLP gate's activation: ``silu``, or ``gelu_tanh`` (Gemma 3)."""
        return self.family.activation

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def post_norm(self) -> bool:
        """Each branch's output, not its input, is normalised (OLMo 2)."""
        return self.family.post_norm

    @property
    def fused_projections(self) -> bool:
        """q, k and v are one ``qkv_proj``, gate and up one ``gate_up_proj`` (Phi-3)."""
        return self.family.fused_projections

    @property
    def whole_qk_norm(self) -> bool:
        """q and k are each normalised as one whole projection (OLMo 2), not head by head."""
        return self.qk_norm and self.family.qk_norm == "whole"

    @property
    def qk_norm_widths(self) -> tuple[int, int]:
        """The widths of the q and k norms' weights: head_dim each (Qwen3, per head) or the
        whole projections' (OLMo 2)."""
        if self.whole_qk_norm:
            return self.q_size, self.kv_size
        return self.head_dim, self.head_dim

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view (divisors as a list, scaling as a plain dict)."""
        out = dataclasses.asdict(self)
        if self.rope_freq_divisors is not None:
            out["rope_freq_divisors"] = list(self.rope_freq_divisors)
        if self.rope_scaling is not None:
            out["rope_scaling"] = dict(self.rope_scaling)
        if self.layer_types is not None:
            out["layer_types"] = list(self.layer_types)
        return out

    def numerics(self) -> dict[str, Any]:
        """Everything here that changes the forward pass, JSON-ready: two bases with equal
        weights and equal numerics compute the same function. Reals are rounded to float32 (the
        precision GGUF stores them in) and the rope is its inverse frequencies, so a GGUF's
        divisors and a config.json's Llama-3 scaling of the same rope compare alike; token ids
        and the context length, which no forward pass reads, are left out."""
        from assay.model.decoder import rope_inverse_frequencies

        def real(value: float | None) -> float | None:
            return None if value is None else struct.unpack("f", struct.pack("f", value))[0]

        return {
            # a GGUF files Mistral under llama (its window is sliding_window below): the same
            # model read from either is the same base
            "architecture": self.family.layout,
            **{name: getattr(self, name) for name in SIZE_FIELDS},
            "rms_norm_eps": real(self.rms_norm_eps),
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": self.attention_bias,
            "qk_norm": self.qk_norm,
            **{name: real(getattr(self, name)) for name in GRANITE_SCALARS},
            # a window no shorter than the context never binds: the same as none (a Mistral's
            # GGUF, which has no window key, is the same base as its folder)
            "sliding_window": (
                self.sliding_window
                if self.sliding_window is not None
                and self.sliding_window < self.max_position_embeddings
                else None
            ),
            "rope_inverse_frequencies": rope_inverse_frequencies(self).tolist(),
            # Gemma 3's alone (a key only where set, so other families' fingerprints stand)
            **self._per_layer_numerics(real),
        }

    def _per_layer_numerics(self, real: Any) -> dict[str, Any]:
        from assay.model.decoder import rope_inverse_frequencies

        out: dict[str, Any] = {}
        if self.layer_types is not None:
            out["layer_types"] = list(self.layer_types)
        if self.rope_local_theta is not None:
            local = rope_inverse_frequencies(self, kind="sliding_attention")
            out["rope_local_inverse_frequencies"] = local.tolist()
        if self.query_pre_attn_scalar is not None:
            out["query_pre_attn_scalar"] = real(self.query_pre_attn_scalar)
        return out

    def numerics_sha256(self) -> str:
        """sha256 of :meth:`numerics` as sorted JSON: equal for configs that compute alike."""
        text = json.dumps(self.numerics(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """Canonical tensor name -> shape (out, in) for every tensor the file must hold."""
        h, f, q, kv = self.hidden_size, self.intermediate_size, self.q_size, self.kv_size
        shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (self.vocab_size, h)}
        for i in range(self.num_layers):
            p = f"layers.{i}."
            if not self.post_norm:
                shapes[p + "input_layernorm.weight"] = (h,)
            if self.fused_projections:
                shapes[p + "self_attn.qkv_proj.weight"] = (q + 2 * kv, h)
            else:
                shapes[p + "self_attn.q_proj.weight"] = (q, h)
                shapes[p + "self_attn.k_proj.weight"] = (kv, h)
                shapes[p + "self_attn.v_proj.weight"] = (kv, h)
            shapes[p + "self_attn.o_proj.weight"] = (h, q)
            if self.qk_norm:
                q_norm, k_norm = self.qk_norm_widths
                shapes[p + "self_attn.q_norm.weight"] = (q_norm,)
                shapes[p + "self_attn.k_norm.weight"] = (k_norm,)
            if self.attention_bias:
                shapes[p + "self_attn.q_proj.bias"] = (q,)
                shapes[p + "self_attn.k_proj.bias"] = (kv,)
                shapes[p + "self_attn.v_proj.bias"] = (kv,)
            shapes[p + "post_attention_layernorm.weight"] = (h,)
            if self.fused_projections:
                shapes[p + "mlp.gate_up_proj.weight"] = (2 * f, h)
            else:
                shapes[p + "mlp.gate_proj.weight"] = (f, h)
                shapes[p + "mlp.up_proj.weight"] = (f, h)
            if self.sandwich_norm:
                shapes[p + "pre_feedforward_layernorm.weight"] = (h,)
            shapes[p + "mlp.down_proj.weight"] = (h, f)
            if self.post_norm or self.sandwich_norm:
                shapes[p + "post_feedforward_layernorm.weight"] = (h,)
        shapes["norm.weight"] = (h,)
        if not self.tie_word_embeddings:
            shapes["lm_head.weight"] = (self.vocab_size, h)
        return shapes


def _require(source: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in source:
        raise ModelFileError(f"{where}: missing required field {key!r}")
    return source[key]


def _finite(value: Any) -> bool:
    """A real number (not a bool) that is finite as a float; an integer too large for a float
    is not (math.isfinite would raise on it)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _integer(value: Any, key: str, where: str, limit: str) -> int:
    """``value`` as an int in 1..LIMITS[limit] when it is one (2.0 counts; 2.5, "2", true, 0
    and 1e30 layers do not); refusals name the file's ``key``."""
    whole = isinstance(value, numbers.Integral) or (
        isinstance(value, float) and math.isfinite(value) and value.is_integer()
    )
    if isinstance(value, bool) or not whole or not 0 < value <= LIMITS[limit]:
        raise ModelFileError(
            f"{where}: {key} must be a positive integer up to {LIMITS[limit]:,.0f}, got {value!r}"
        )
    return int(value)


def _real(value: Any, key: str, where: str, limit: str) -> float:
    """``value`` as a float when it is a finite number in (0, LIMITS[limit]] (true, "1e-5", 0
    and NaN are not); refusals name the file's ``key``."""
    if not _finite(value) or not 0 < value <= LIMITS[limit]:
        shown = value if not isinstance(value, int) or value < 10**20 else "a larger integer"
        raise ModelFileError(
            f"{where}: {key} must be a positive number up to {LIMITS[limit]:g}, got {shown!r}"
        )
    return float(value)


def _whole_or_real(value: Any, key: str, where: str) -> int | float:
    """A positive number in LIMITS[key]'s range, kept an integer where it is one (transformers
    computes a Llama 3 rope with a fractional original context too)."""
    real = _real(value, key, where, key)
    return int(value) if isinstance(value, int) else real


def _float_kind(value: Any, key: str, where: str) -> Any:
    """``value``, unless it is a JSON integer where transformers 5 types the field as a float
    (its strict config refuses ``"rms_norm_eps": 1``); other kinds are left to the range check."""
    if isinstance(value, int) and not isinstance(value, bool):
        shown = repr(value) if abs(value) < 10**20 else "a larger one"
        raise ModelFileError(
            f"{where}: {key} must be a positive number written as a float (1e-05), got the "
            f"integer {shown}; transformers 5 refuses an integer there"
        )
    return value


def _built(where: str, **fields: Any) -> ModelConfig:
    """ModelConfig(**fields), its refusals naming the file they came from."""
    try:
        return ModelConfig(**fields)
    except ModelFileError as error:
        raise ModelFileError(f"{where}: {error}") from None


def config_from_hf(hf: Mapping[str, Any], where: str) -> ModelConfig:
    """Build a ModelConfig from a parsed HF ``config.json``; ``where`` names the file in errors.

    Every field that changes the math is read or, for a value assay does not compute, refused
    in one line naming the key and the value (:mod:`assay.model.hf_fields`); every number is
    range-checked before it sizes anything.
    """
    model_type = _require(hf, "model_type", where)
    if model_type not in NAMES:
        raise UnsupportedModelError(
            f"{where}: model_type {model_type!r} is not supported; "
            f"expected one of {', '.join(NAMES)}"
        )
    for key in ("rope_parameters", "rope_scaling"):
        if hf.get(key) is not None and not isinstance(hf[key], Mapping):
            raise ModelFileError(f"{where}: {key} must be an object, got {hf[key]!r}")
    family = FAMILIES[model_type]
    tied = hf.get("tie_word_embeddings", family.tied)
    if not isinstance(tied, bool):
        raise ModelFileError(f"{where}: tie_word_embeddings must be true or false, got {tied!r}")
    check_refused_fields(hf, model_type, where)

    def whole(key: str, limit: str, default: Any = None) -> int:
        value = _require(hf, key, where) if default is None else hf.get(key, default)
        return _integer(value, key, where, limit)

    hidden = whole("hidden_size", "hidden_size")
    heads = whole("num_attention_heads", "num_heads")
    layers = whole("num_hidden_layers", "num_layers")
    _check_layer_types(hf, layers, where)
    # transformers >= 5 folds rope_theta and rope_scaling into rope_parameters.
    rope = rope_parameters(hf)
    context = whole("max_position_embeddings", "max_position_embeddings", family.context)
    theta_value = rope.get("rope_theta", hf.get("rope_theta", 10000.0))
    theta = _real(theta_value, "rope_theta", where, "rope_theta")
    scaling = None
    # Gemma 3 reads a rope per layer kind (_gemma3_fields), never this flat one
    if rope.get("rope_type", "default") == "llama3" and family.window_reading != "per_kind":
        scaling = {
            "rope_type": "llama3",
            "factor": _real(_require(rope, "factor", where), "factor", where, "factor"),
            **{
                key: _real(rope.get(key, default), key, where, key)
                for key, default in (("low_freq_factor", 1.0), ("high_freq_factor", 4.0))
            },
            # a top-level one wins, as in transformers; then the rope's own; then the context
            "original_max_position_embeddings": _whole_or_real(
                hf.get(
                    "original_max_position_embeddings",
                    rope.get("original_max_position_embeddings", context),
                ),
                "original_max_position_embeddings",
                where,
            ),
        }
    eos = hf.get("eos_token_id")
    # absent, transformers' Qwen3 takes 128 and the others hidden / heads; a null is that
    # default only where transformers' model reads it so, and is refused (as a value that is no
    # integer) where transformers refuses it (Qwen3) or cannot run it (Qwen2, Granite)
    head_dim = hf.get("head_dim", ABSENT)
    if head_dim is ABSENT or (head_dim is None and family.null_head_dim_is_default):
        head_dim = family.head_dim or hidden // heads
    kv_heads = hf.get("num_key_value_heads")
    vocab = whole("vocab_size", "vocab_size")
    fields = dict(
        architecture=model_type,
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=whole("intermediate_size", "intermediate_size"),
        num_layers=layers,
        num_heads=heads,
        # absent (or null) means the default; 0 is a value, and out of range
        num_kv_heads=_integer(
            heads if kv_heads is None else kv_heads, "num_key_value_heads", where, "num_kv_heads"
        ),
        head_dim=_integer(head_dim, "head_dim", where, "head_dim"),
        rope_theta=theta,
        rms_norm_eps=_real(
            _float_kind(
                hf.get("rms_norm_eps", family.rms_norm_eps),
                "rms_norm_eps",
                where,
            ),
            "rms_norm_eps",
            where,
            "rms_norm_eps",
        ),
        max_position_embeddings=context,
        tie_word_embeddings=tied,
        # Qwen2 always has a q, k, v bias; Llama's attention_bias (q, k, v and o) is refused
        # in hf_fields, and Mistral has none whatever the file says.
        attention_bias=family.attention_bias,
        qk_norm=family.qk_norm is not None,
        **_granite_scalars(hf, family, where),
        sliding_window=None,
        rope_scaling=scaling,
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=eos[0] if isinstance(eos, list) else eos,
        pad_token_id=_pad_token(hf, family, vocab, where),
    )
    if family.window_reading == "per_kind":
        fields.update(_gemma3_fields(hf, hidden, heads, layers, where))
    else:
        fields["sliding_window"] = _sliding_window(hf, family, layers, where)
    return _built(where, **fields)


def _gemma3_fields(
    hf: Mapping[str, Any], hidden: int, heads: int, layers: int, where: str
) -> dict[str, Any]:
    """Gemma 3's per-layer attention as transformers' ``Gemma3TextConfig`` reads it: the kind
    of each layer (``layer_types``, or every ``sliding_window_pattern``-th layer full), the
    sliding layers' window, a rope theta for each kind (``rope_parameters`` per kind, or the
    legacy ``rope_theta`` and ``rope_local_base_freq``) and the attention scale's
    ``query_pre_attn_scalar``. Refused by name: what transformers refuses (a hidden size the
    heads do not divide, a pattern that is no positive integer) and bidirectional attention."""
    if hidden % heads:
        raise ModelFileError(
            f"{where}: hidden_size {hidden} is not a multiple of num_attention_heads {heads} "
            "(transformers' Gemma 3 refuses it)"
        )
    bidirectional = hf.get("use_bidirectional_attention", False)
    if bidirectional not in (False, None):
        raise UnsupportedModelError(
            f"{where}: use_bidirectional_attention {bidirectional!r} is not supported; expected "
            "false (assay trains causal language models)"
        )
    kinds = hf.get("layer_types")
    if kinds is None:
        pattern = hf.get("sliding_window_pattern", GEMMA3_WINDOW_PATTERN)
        every = _integer(pattern, "sliding_window_pattern", where, "num_layers")
        kinds = [
            "sliding_attention" if (i + 1) % every else "full_attention" for i in range(layers)
        ]
    unknown = set(kinds) - set(LAYER_KINDS)
    if unknown:
        raise UnsupportedModelError(
            f"{where}: layer_types holds {sorted(map(str, unknown))[0]!r}; "
            "expected full_attention or sliding_attention"
        )
    window = hf.get("sliding_window", GEMMA3_WINDOW)
    if window is None:
        raise ModelFileError(
            f"{where}: sliding_window must be a positive integer (Gemma 3 builds a sliding "
            "mask whatever its layers); transformers cannot run a null one either"
        )
    chosen = hf.get("rope_parameters")
    legacy = hf.get("rope_scaling")
    if (
        legacy is not None
        and chosen is not None
        and not isinstance(chosen.get("full_attention"), Mapping)
    ):
        raise ModelFileError(
            f"{where}: rope_scaling is set beside a rope_parameters without a full_attention "
            "object to update; transformers cannot read it either"
        )
    theta = {}
    for kind, legacy in (
        ("full_attention", "rope_theta"),
        ("sliding_attention", "rope_local_base_freq"),
    ):
        value = gemma3_rope(hf, kind).get("rope_theta", hf.get(legacy, GEMMA3_THETA[kind]))
        theta[kind] = _real(value, f"rope_parameters.{kind}.rope_theta", where, "rope_theta")
    scalar = hf.get("query_pre_attn_scalar", GEMMA3_QUERY_PRE_ATTN_SCALAR)
    # an integer, as transformers types it (its strict config refuses 256.0)
    if isinstance(scalar, float):
        raise ModelFileError(
            f"{where}: query_pre_attn_scalar must be a positive integer up to "
            f"{LIMITS['query_pre_attn_scalar']:,.0f}, got {scalar!r}"
        )
    return {
        "layer_types": tuple(kinds),
        "sliding_window": _integer(window, "sliding_window", where, "sliding_window"),
        "rope_theta": theta["full_attention"],
        "rope_local_theta": theta["sliding_attention"],
        "rope_scaling": None,  # a rope_parameters that names no kind is not read
        "query_pre_attn_scalar": _integer(
            scalar, "query_pre_attn_scalar", where, "query_pre_attn_scalar"
        ),
    }


def _pad_token(hf: Mapping[str, Any], family: Family, vocab: int, where: str) -> int | None:
    """pad_token_id as transformers reads it (its family's default when absent), or
    ModelFileError naming the file for an id transformers cannot build the embedding with: one
    outside -vocab_size..vocab_size - 1 (PyTorch's padding_idx range), or not an integer."""
    pad = hf.get("pad_token_id", family.pad_token)
    if pad is None:
        return None
    if isinstance(pad, bool) or not isinstance(pad, int) or not -vocab <= pad < vocab:
        shown = "absent, so " if "pad_token_id" not in hf else ""
        raise ModelFileError(
            f"{where}: pad_token_id ({shown}{pad!r}) must be a token id below vocab_size "
            f"{vocab}, or null; transformers cannot build the embedding with it"
        )
    return pad


def _check_layer_types(hf: Mapping[str, Any], layers: int, where: str) -> None:
    """ModelFileError naming the file unless ``layer_types`` is absent, null, or one kind
    name per layer (transformers refuses any other length in every family)."""
    kinds = hf.get("layer_types")
    if kinds is None:
        return
    if (
        not isinstance(kinds, list)
        or len(kinds) != layers
        or not all(isinstance(kind, str) for kind in kinds)
    ):
        raise ModelFileError(f"{where}: layer_types must list one kind per layer ({layers})")


def _granite_scalars(hf: Mapping[str, Any], family: Family, where: str) -> dict[str, Any]:
    """Granite's four scalars as transformers reads them (each 1 when absent); nothing for
    another family, whose file may not ask for them (hf_fields refuses them by name)."""
    if not family.scalars:
        return {}
    return {key: _real(hf.get(key, 1.0), key, where, key) for key in GRANITE_SCALARS}


def _sliding_window(hf: Mapping[str, Any], family: Family, layers: int, where: str) -> int | None:
    """The window every layer attends within, or None for full causal attention, as
    transformers reads ``family``'s keys; ModelFileError for layers that would mix the two
    (assay applies one attention kind to every layer)."""
    if family.window_reading == "none":
        return None  # transformers' Llama, Granite and OLMo 2 never read sliding_window
    if family.window_reading == "every_layer":
        window = hf.get("sliding_window", family.default_window)
        return (
            None if window is None else _integer(window, "sliding_window", where, "sliding_window")
        )
    use = hf.get("use_sliding_window", False)
    if not isinstance(use, bool):
        raise ModelFileError(f"{where}: use_sliding_window must be true or false, got {use!r}")
    declared = hf.get("sliding_window")
    if declared is not None and (isinstance(declared, bool) or not isinstance(declared, int)):
        # typed even where use_sliding_window leaves it unread, as transformers types it
        raise ModelFileError(
            f"{where}: sliding_window must be an integer or null, got {declared!r}"
        )
    window = hf.get("sliding_window", QWEN2_WINDOW) if use else None
    kinds = hf.get("layer_types")
    if kinds is None:
        first = hf.get("max_window_layers", QWEN2_WINDOW_LAYERS)
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise ModelFileError(
                f"{where}: max_window_layers must be a whole number of layers, got {first!r}"
            )
        kinds = [
            "sliding_attention" if window is not None and i >= first else "full_attention"
            for i in range(layers)
        ]
    unknown = set(kinds) - {"full_attention", "sliding_attention"}
    if unknown:
        raise UnsupportedModelError(
            f"{where}: layer_types holds {sorted(map(str, unknown))[0]!r}; "
            "expected full_attention or sliding_attention"
        )
    if window is None and "sliding_attention" in kinds:
        raise UnsupportedModelError(
            f"{where}: layer_types names sliding_attention layers but there is no window "
            f"(use_sliding_window {use!r}, sliding_window {hf.get('sliding_window')!r}); "
            "transformers cannot run such a file either"
        )
    if window is None or set(kinds) == {"full_attention"}:
        return None
    if set(kinds) != {"sliding_attention"}:
        sliding = kinds.count("sliding_attention")
        raise UnsupportedModelError(
            f"{where}: use_sliding_window with max_window_layers/layer_types gives {sliding} "
            f"sliding and {layers - sliding} full-attention layers; assay applies one kind to "
            "every layer"
        )
    return _integer(window, "sliding_window", where, "sliding_window")


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
    if arch not in GGUF_NAMES:
        raise UnsupportedModelError(
            f"{where}: GGUF architecture {arch!r} is not supported; expected "
            f"{', '.join(GGUF_NAMES[:-1])} or {GGUF_NAMES[-1]}"
        )

    def key(name: str) -> Any:
        return _require(meta, f"{arch}.{name}", where)

    def whole(name: str, value: Any, limit: str) -> int:
        return _integer(value, f"{arch}.{name}", where, limit)

    _check_gguf_refusals(meta, arch, where)
    hidden = whole("embedding_length", key("embedding_length"), "hidden_size")
    heads = whole("attention.head_count", key("attention.head_count"), "num_heads")
    kv_heads = whole(
        "attention.head_count_kv",
        meta.get(f"{arch}.attention.head_count_kv", heads),
        "num_kv_heads",
    )
    key_length = meta.get(f"{arch}.attention.key_length") or hidden // heads
    head_dim = whole("attention.key_length", key_length, "head_dim")
    rotary = meta.get(f"{arch}.rope.dimension_count", head_dim)
    if rotary != head_dim:
        raise UnsupportedModelError(
            f"{where}: {arch}.rope.dimension_count {rotary!r} is not supported; expected the "
            f"head size {head_dim} (rotary embedding over the whole head)"
        )
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = meta.get(f"{arch}.vocab_size") or (len(tokens) if tokens is not None else None)
    if vocab is None:
        raise ModelFileError(f"{where}: cannot tell the vocabulary size (no vocab_size, no tokens)")
    theta = _real(
        meta.get(f"{arch}.rope.freq_base", 10000.0), f"{arch}.rope.freq_base", where, "rope_theta"
    )
    return _built(
        where,
        architecture=arch,
        vocab_size=whole("vocab_size", vocab, "vocab_size"),
        hidden_size=hidden,
        intermediate_size=whole(
            "feed_forward_length", key("feed_forward_length"), "intermediate_size"
        ),
        num_layers=whole("block_count", key("block_count"), "num_layers"),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        rope_theta=theta,
        rms_norm_eps=_real(
            meta.get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5),
            f"{arch}.attention.layer_norm_rms_epsilon",
            where,
            "rms_norm_eps",
        ),
        max_position_embeddings=whole(
            "context_length", meta.get(f"{arch}.context_length", 2048), "max_position_embeddings"
        ),
        tie_word_embeddings=not has_output,
        attention_bias=has_qkv_bias,
        qk_norm=FAMILIES[arch].qk_norm is not None,
        **_gguf_granite_scalars(meta, arch, where),
        rope_freq_divisors=rope_freq_divisors,
        bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
        eos_token_id=meta.get("tokenizer.ggml.eos_token_id"),
        pad_token_id=meta.get("tokenizer.ggml.padding_token_id"),
    )


# Granite's scalars under llama.cpp's names
GGUF_GRANITE_KEYS = {
    "embedding_multiplier": "embedding_scale",
    "residual_multiplier": "residual_scale",
    "attention_multiplier": "attention.scale",
    "logits_scaling": "logit_scale",
}


def _gguf_granite_scalars(meta: Mapping[str, Any], arch: str, where: str) -> dict[str, Any]:
    """Granite's four scalars from llama.cpp's keys (each 1 when absent); nothing for another
    architecture."""
    if not FAMILIES[arch].scalars:
        return {}
    return {
        field: _real(meta.get(f"granite.{key}", 1.0), f"granite.{key}", where, field)
        for field, key in GGUF_GRANITE_KEYS.items()
    }


def _check_gguf_refusals(meta: Mapping[str, Any], arch: str, where: str) -> None:
    """UnsupportedModelError naming the key and value for GGUF metadata that changes the math
    in a way assay does not compute: rope scaling other than none (Llama 3's is a rope_freqs
    tensor, which is read), mixture-of-experts layers, LayerNorm instead of RMSNorm."""
    scaling = meta.get(f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        raise UnsupportedModelError(
            f"{where}: {arch}.rope.scaling.type {scaling!r} is not supported; expected none"
        )
    experts = meta.get(f"{arch}.expert_count")
    if experts not in (None, 0):
        raise UnsupportedModelError(
            f"{where}: {arch}.expert_count {experts!r} is not supported; expected no experts "
            "(mixture-of-experts layers are not built)"
        )
    if f"{arch}.attention.layer_norm_epsilon" in meta:
        raise UnsupportedModelError(
            f"{where}: {arch}.attention.layer_norm_epsilon is set; expected RMSNorm "
            "(layer_norm_rms_epsilon), LayerNorm is not built"
        )


# a decoder layer's tensors, by canonical name (layers.N.) or GGUF name (blk.N.)
_LAYER_TENSOR = re.compile(r"(?:layers|blk)\.(\d+)\.")


def check_layers_held(config: ModelConfig, names: Iterable[str], where: str) -> None:
    """ModelFileError naming ``where`` when the config declares more decoder layers than the
    file's tensor names hold. Checked before anything sized by the layer count is built (the
    table of expected shapes, a memory plan), so a header that declares a billion layers is
    refused in one line rather than allocated."""
    held = {int(m.group(1)) for name in names if (m := _LAYER_TENSOR.match(name))}
    if config.num_layers > len(held):
        first = next(i for i in range(config.num_layers) if i not in held)
        raise ModelFileError(
            f"{where}: the config declares {config.num_layers} layers but the file holds the "
            f"tensors of {len(held)} (no tensor of layers.{first}.)"
        )
