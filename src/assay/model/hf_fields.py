"""Which ``config.json`` fields change a model's math, family by family, and what assay does with
each: reads it, refuses the values it does not compute, or leaves it because transformers' own
model of that family ignores it too.

The rule is that no field that changes the logits is silently dropped. A file that asks for
something assay does not build (GELU, soft-capping, attention dropout, a bias on the MLP) is
refused in one line naming the file, the key and the value, before any weight is decoded.
``docs/models.md`` prints this table; a test keeps the two equal, and a generated test shows that
no value outside a row's accepted set loads.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from assay.errors import UnsupportedModelError
from assay.model.families import LAYER_KINDS
from assay.model.families import NAMES as FAMILIES

GEMMA = ("gemma3_text",)
# transformers' ACT2FN maps both names to SiLU
SILU_NAMES = ("silu", "swish")
# Gemma's activation: GELU with the tanh approximation, as torch computes it
GELU_TANH_NAMES = ("gelu_pytorch_tanh",)
ROPE_TYPES = ("default", "llama3")
# transformers' Phi-3 refuses every rope type but default and longrope (not built)
PHI3_ROPE_TYPES = ("default",)
# Granite's four scalars, as config.json names them (each 1 in every other family)
GRANITE_SCALARS = (
    "embedding_multiplier",
    "residual_multiplier",
    "attention_multiplier",
    "logits_scaling",
)


class _Absent:
    """The key is not in the file (transformers then takes the family's default)."""

    def __repr__(self) -> str:
        return "absent"


ABSENT = _Absent()


def rope_parameters(hf: Mapping[str, Any]) -> dict[str, Any]:
    """The rope settings as transformers 5 reads them: a non-empty legacy ``rope_scaling``
    replaces ``rope_parameters`` whole (it is not merged into it), and its ``type`` is read as
    ``rope_type`` when that is absent. A value that is not an object counts as absent here; the
    config reader refuses it by name. ``rope_theta`` outside these is the caller's fallback."""
    legacy = hf.get("rope_scaling")
    chosen = legacy if isinstance(legacy, Mapping) and legacy else hf.get("rope_parameters")
    rope = dict(chosen) if isinstance(chosen, Mapping) else {}
    if "type" in rope and "rope_type" not in rope:
        rope["rope_type"] = rope.pop("type")
    return rope


def gemma3_rope(hf: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """Gemma 3's rope settings for its layers of ``kind`` (full_attention or sliding_attention)
    as transformers 5's ``Gemma3TextConfig`` builds them: ``rope_parameters[kind]`` (a flat
    ``rope_parameters`` names no kind and is not read), the full layers' updated with a legacy
    ``rope_scaling``, a ``type`` read as ``rope_type``. The theta the settings leave out is the
    caller's (``rope_theta`` or ``rope_local_base_freq``)."""
    chosen = hf.get("rope_parameters")
    own = chosen.get(kind) if isinstance(chosen, Mapping) else None
    rope = dict(own) if isinstance(own, Mapping) else {}
    legacy = hf.get("rope_scaling")
    if kind == "full_attention" and isinstance(legacy, Mapping):
        rope.update(legacy)
    if "type" in rope and "rope_type" not in rope:
        rope["rope_type"] = rope.pop("type")
    return rope


def _rope_type(hf: Mapping[str, Any]) -> Any:
    return rope_parameters(hf).get("rope_type", ABSENT)


def _rope_per_kind(hf: Mapping[str, Any]) -> Any:
    """The first layer kind rope_parameters is keyed by, or absent."""
    chosen = hf.get("rope_parameters")
    if isinstance(chosen, Mapping):
        for kind in ("full_attention", "sliding_attention"):
            if kind in chosen:
                return kind
    return ABSENT


def _gemma3_rope_types(hf: Mapping[str, Any]) -> Any:
    """The first rope type of Gemma 3's two kinds of layer that is not default, or absent."""
    for kind in ("full_attention", "sliding_attention"):
        found = gemma3_rope(hf, kind).get("rope_type", ABSENT)
        if found is not ABSENT and found != "default":
            return found
    return ABSENT


def _partial_rotary(hf: Mapping[str, Any]) -> Any:
    """The first partial_rotary_factor, top-level, in the rope settings or in a layer kind's,
    that is not 1."""
    for value in (
        hf.get("partial_rotary_factor", ABSENT),
        rope_parameters(hf).get("partial_rotary_factor", ABSENT),
        # Gemma 3's rope per layer kind (other families refuse such a rope by name)
        *(gemma3_rope(hf, kind).get("partial_rotary_factor", ABSENT) for kind in LAYER_KINDS),
    ):
        if value is not ABSENT and not _one(value):
            return value
    return ABSENT


def _all_full(kinds: Any) -> bool:
    """A non-empty list that names full_attention for each of its layers (its length is
    checked where the layers are read)."""
    return isinstance(kinds, list) and bool(kinds) and all(k == "full_attention" for k in kinds)


def _unread_window(hf: Mapping[str, Any]) -> Any:
    """sliding_window as transformers' cache reads it in a family whose forward ignores it:
    absent when layer_types names every layer full_attention (the cache then slides nothing)."""
    return ABSENT if _all_full(hf.get("layer_types")) else hf.get("sliding_window", ABSENT)


def _false(value: Any) -> bool:
    """Absent or JSON false: a field transformers types as a boolean, where 0 and null are
    refused as transformers 5 refuses them, not read as false."""
    return value is ABSENT or value is False


def _one(value: Any) -> bool:
    """Numerically 1 (not a boolean): the feature is not asked for."""
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    return number and value == 1


def _number(value: Any) -> bool:
    """A JSON number (int or float, not a boolean), as transformers types ``float | int``."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _zero(value: Any) -> bool:
    """A JSON number equal to 0: dropout not asked for, in the kind transformers accepts."""
    return _number(value) and value == 0


@dataclass(frozen=True)
class FieldRule:
    """One row of the table: ``key`` in the families named, and what assay does with it.

    ``accepts`` is None for a field that is read (its range is checked where it is read) or
    has no effect; otherwise a value it rejects is refused. ``value`` finds the field in the
    parsed file (the key itself unless nested).
    """

    key: str
    families: tuple[str, ...]
    treatment: str
    expected: str
    accepts: Callable[[Any], bool] | None = None
    value: Callable[[Mapping[str, Any]], Any] | None = None

    def read(self, hf: Mapping[str, Any]) -> Any:
        """The field's value in ``hf``, or :data:`ABSENT`."""
        return self.value(hf) if self.value else hf.get(self.key, ABSENT)


READ = "read"
REFUSED = "refused unless"
NO_EFFECT = "no effect"

ALL = FAMILIES
NOT_GRANITE = tuple(f for f in FAMILIES if f != "granite")
PRE_NORM = tuple(f for f in FAMILIES if f not in ("olmo2", "gemma3_text"))
NOT_PHI3 = tuple(f for f in FAMILIES if f != "phi3")
LLAMA_ROPE = tuple(f for f in FAMILIES if f not in ("phi3", "gemma3_text"))
NOT_GEMMA = tuple(f for f in FAMILIES if f not in GEMMA)
NOT_GRANITE_OR_GEMMA = tuple(f for f in NOT_GRANITE if f not in GEMMA)
RULES: tuple[FieldRule, ...] = (
    FieldRule(
        "model_type",
        ALL,
        READ,
        "llama, mistral, qwen2, qwen3, granite, olmo2, phi3 or gemma3_text (picks the family)",
    ),
    FieldRule("vocab_size", ALL, READ, "a positive integer up to 4,194,304"),
    FieldRule("hidden_size", ALL, READ, "a positive integer up to 131,072"),
    FieldRule("intermediate_size", ALL, READ, "a positive integer up to 524,288"),
    FieldRule("num_hidden_layers", ALL, READ, "a positive integer up to 1,024"),
    FieldRule("num_attention_heads", ALL, READ, "a positive integer up to 1,024"),
    FieldRule(
        "num_key_value_heads", ALL, READ, "a positive integer up to 1,024 dividing the heads"
    ),
    FieldRule(
        "head_dim",
        ("llama", "mistral"),
        READ,
        "an even positive integer up to 2,048 (default hidden / heads, absent or null)",
    ),
    FieldRule(
        "head_dim",
        ("qwen2", "granite", "olmo2", "phi3"),
        READ,
        "an even positive integer up to 2,048 (default hidden / heads when absent; null is "
        "refused, as transformers' Qwen2, Granite, OLMo 2 and Phi-3 cannot run it)",
    ),
    FieldRule(
        "head_dim",
        ("qwen3",),
        READ,
        "an even positive integer up to 2,048 (default 128 when absent; null is refused, as "
        "transformers' Qwen3 refuses it)",
    ),
    FieldRule(
        "head_dim",
        GEMMA,
        READ,
        "an even positive integer up to 2,048 (default 256 when absent; null is refused, as "
        "transformers' Gemma 3 refuses it); hidden_size must be a multiple of the heads, as "
        "transformers requires",
    ),
    FieldRule(
        "rms_norm_eps",
        ALL,
        READ,
        "a positive number up to 1 (default as transformers: 1e-5 for olmo2 and phi3, 1e-6 for "
        "the others)",
    ),
    FieldRule("rope_theta", ALL, READ, "a positive number up to 1e12 (or in rope_parameters)"),
    FieldRule(
        "max_position_embeddings",
        ALL,
        READ,
        "a positive integer up to 16,777,216 (default as transformers: 2048 for llama, "
        "granite and olmo2, 4096 for phi3, 32768 for qwen2 and qwen3, 131072 for mistral and "
        "gemma3_text)",
    ),
    FieldRule(
        "tie_word_embeddings",
        ALL,
        READ,
        "true or false (default false; true for gemma3_text, as transformers); nothing else",
    ),
    FieldRule(
        "rope_scaling.rope_type",
        LLAMA_ROPE,
        REFUSED,
        "default or llama3 (linear, dynamic, yarn and longrope are not built)",
        accepts=lambda v: v is ABSENT or v in ROPE_TYPES,
        value=_rope_type,
    ),
    FieldRule(
        "rope_scaling.rope_type",
        ("phi3",),
        REFUSED,
        "default (longrope, the only other type transformers' Phi-3 runs, is not built)",
        accepts=lambda v: v is ABSENT or v in PHI3_ROPE_TYPES,
        value=_rope_type,
    ),
    FieldRule(
        "original_max_position_embeddings",
        LLAMA_ROPE,
        READ,
        "a positive number up to 16,777,216: a Llama 3 rope's original context, ahead of the "
        "rope settings' own (then the model's context), as transformers reads it",
    ),
    FieldRule(
        "rope_parameters.<kind>",
        NOT_GEMMA,
        REFUSED,
        "absent (a rope per layer kind is Gemma 3's: transformers' Qwen cannot read one, and "
        "the other families ignore it)",
        accepts=lambda v: v is ABSENT,
        value=_rope_per_kind,
    ),
    FieldRule(
        "rope_parameters.<kind>.rope_type, rope_scaling.rope_type",
        GEMMA,
        REFUSED,
        "default for both kinds of layer (linear, the larger Gemma 3's, is not built)",
        accepts=lambda v: v is ABSENT or v == "default",
        value=_gemma3_rope_types,
    ),
    FieldRule(
        "rope_parameters.<kind>.rope_theta, rope_theta, rope_local_base_freq",
        GEMMA,
        READ,
        "a positive number up to 1e12 for each kind of layer: full_attention's (default "
        "rope_theta, else 1,000,000) and sliding_attention's (default rope_local_base_freq, "
        "else 10,000); a rope_parameters that names no kind is not read, as transformers",
    ),
    FieldRule(
        "hidden_act",
        NOT_GEMMA,
        REFUSED,
        "silu or swish (both SiLU)",
        accepts=lambda v: v is ABSENT or v in SILU_NAMES,
    ),
    FieldRule(
        "hidden_act",
        GEMMA,
        NO_EFFECT,
        "ignored as transformers' Gemma 3 ignores it (it reads hidden_activation)",
    ),
    FieldRule(
        "hidden_activation",
        GEMMA,
        REFUSED,
        "gelu_pytorch_tanh (the default; GELU with the tanh approximation)",
        accepts=lambda v: v is ABSENT or v in GELU_TANH_NAMES,
    ),
    FieldRule(
        "partial_rotary_factor",
        NOT_PHI3,
        REFUSED,
        "1 or null, top-level or in rope_parameters (rotary embedding over the whole head)",
        accepts=lambda v: v is ABSENT or v is None or _one(v),
        value=_partial_rotary,
    ),
    FieldRule(
        "partial_rotary_factor",
        ("phi3",),
        REFUSED,
        "1, top-level or in rope_parameters (rotary embedding over the whole head; null is "
        "refused, as transformers' Phi-3 multiplies by it)",
        accepts=lambda v: v is ABSENT or _one(v),
        value=_partial_rotary,
    ),
    FieldRule(
        "attention_dropout",
        ALL,
        REFUSED,
        "0 (assay trains without attention dropout; null is refused, as transformers' config "
        "or its training forward refuses it)",
        accepts=lambda v: v is ABSENT or _zero(v),
    ),
    FieldRule(
        "attention_bias",
        ("llama", "qwen3", "granite", "olmo2", "gemma3_text"),
        REFUSED,
        "false (this bias is on q, k, v and o; assay builds the q, k, v bias of qwen2 only)",
        accepts=_false,
    ),
    FieldRule(
        "attention_bias",
        ("mistral", "qwen2", "phi3"),
        NO_EFFECT,
        "ignored as transformers ignores it (mistral and phi3: no bias; qwen2: always q, k, v "
        "bias)",
    ),
    FieldRule(
        "mlp_bias",
        ("llama", "granite"),
        REFUSED,
        "false (assay's MLP has no bias)",
        accepts=_false,
    ),
    FieldRule(
        "mlp_bias",
        ("mistral", "qwen2", "qwen3", "olmo2", "phi3", "gemma3_text"),
        NO_EFFECT,
        "ignored as transformers ignores it",
    ),
    FieldRule(
        "sliding_window",
        ("llama", "granite", "olmo2"),
        REFUSED,
        "null or absent, unless layer_types names every layer full_attention (these families' "
        "forward ignores it, but transformers' cache then keeps only the window, so its cached "
        "generation and its forward would be two meanings of one file)",
        accepts=lambda v: v is ABSENT or v is None,
        value=_unread_window,
    ),
    FieldRule(
        "attention_chunk_size",
        ALL,
        REFUSED,
        "null (chunked attention is Llama 4's, not built; transformers' cache would chunk)",
        accepts=lambda v: v is ABSENT or v is None,
    ),
    FieldRule(
        "sliding_window",
        ("mistral",),
        READ,
        "a positive integer up to 16,777,216, or null for none (default 4096, as transformers)",
    ),
    FieldRule(
        "sliding_window",
        ("phi3",),
        READ,
        "a positive integer up to 16,777,216 binding every layer, or null for none (default "
        "none, as transformers)",
    ),
    FieldRule(
        "layer_types",
        ("llama", "granite", "olmo2"),
        REFUSED,
        "absent, or full_attention for every layer (these families have no sliding layer)",
        accepts=lambda v: v is ABSENT or v is None or _all_full(v),
    ),
    FieldRule(
        "layer_types",
        ("mistral", "phi3"),
        REFUSED,
        "absent (per-layer attention kinds are Ministral's, not built)",
        accepts=lambda v: v is ABSENT,
    ),
    FieldRule(
        "use_sliding_window, sliding_window, max_window_layers, layer_types",
        ("qwen2", "qwen3"),
        READ,
        "every layer full attention, or every layer sliding (a mix is refused naming the keys)",
    ),
    FieldRule(
        "attn_logit_softcapping",
        ALL,
        REFUSED,
        "null (soft-capping is Gemma 2's, not built)",
        accepts=lambda v: v is ABSENT or v is None,
    ),
    FieldRule(
        "final_logit_softcapping",
        ALL,
        REFUSED,
        "null (soft-capping is Gemma 2's, not built)",
        accepts=lambda v: v is ABSENT or v is None,
    ),
    FieldRule(
        "query_pre_attn_scalar",
        NOT_GEMMA,
        REFUSED,
        "null (attention is scaled by head_dim^-0.5)",
        accepts=lambda v: v is ABSENT or v is None,
    ),
    FieldRule(
        "query_pre_attn_scalar",
        GEMMA,
        READ,
        "a positive number up to 1,048,576 (default 256): attention scores are scaled by its "
        "^-0.5, not head_dim's",
    ),
    FieldRule(
        "sliding_window, layer_types, sliding_window_pattern",
        GEMMA,
        READ,
        "layer_types names full_attention or sliding_attention per layer (absent: every "
        "sliding_window_pattern-th layer full, default 6); sliding layers attend within "
        "sliding_window (a positive integer up to 16,777,216, default 4096; null is refused, "
        "as transformers cannot run it)",
    ),
    FieldRule(
        "use_bidirectional_attention",
        GEMMA,
        REFUSED,
        "false or null (bidirectional attention is EmbeddingGemma's, not a causal LM's)",
        accepts=lambda v: v is ABSENT or v is None or v is False,
    ),
    *(
        FieldRule(
            key,
            NOT_GRANITE,
            REFUSED,
            "null (Granite's multipliers belong to model_type granite)",
            accepts=lambda v: v is ABSENT or v is None,
        )
        for key in GRANITE_SCALARS
    ),
    FieldRule(
        "embedding_multiplier",
        ("granite",),
        READ,
        "a positive number up to 1e4 (default 1): the embeddings are multiplied by it",
    ),
    FieldRule(
        "residual_multiplier",
        ("granite",),
        READ,
        "a positive number up to 1e4 (default 1): each attention and MLP branch is multiplied "
        "by it before its residual add",
    ),
    FieldRule(
        "attention_multiplier",
        ("granite",),
        READ,
        "a positive number up to 1e4 (default 1): the attention scores' scale, in place of "
        "head_dim^-0.5",
    ),
    FieldRule(
        "logits_scaling",
        ("granite",),
        READ,
        "a positive number up to 1e4 (default 1): the logits are divided by it",
    ),
    FieldRule(
        "norm kind (no key)",
        PRE_NORM,
        NO_EFFECT,
        "fixed by model_type: RMSNorm x * w (not Gemma's x * (1 + w)), before attention and MLP",
    ),
    FieldRule(
        "norm kind (no key)",
        GEMMA,
        READ,
        "fixed by model_type: RMSNorm x * (1 + w), w applied in fp32, on each branch's input "
        "and output (input_layernorm, post_attention_layernorm, pre_feedforward_layernorm, "
        "post_feedforward_layernorm)",
    ),
    FieldRule(
        "norm kind (no key)",
        ("olmo2",),
        READ,
        "fixed by model_type: RMSNorm x * w (w applied in fp32) on the output of attention and "
        "of the MLP before each residual add (post_attention_layernorm, "
        "post_feedforward_layernorm); no norm on a branch's input",
    ),
    FieldRule(
        "q/k norm (no key)",
        ("llama", "mistral", "qwen2", "granite", "phi3"),
        NO_EFFECT,
        "fixed by model_type: none",
    ),
    FieldRule(
        "q/k norm (no key)",
        ("qwen3",),
        READ,
        "fixed by model_type: RMSNorm over each head of q and k (q_norm, k_norm) before RoPE",
    ),
    FieldRule(
        "q/k norm (no key)",
        GEMMA,
        READ,
        "fixed by model_type: RMSNorm x * (1 + w) over each head of q and k (q_norm, k_norm) "
        "before RoPE",
    ),
    FieldRule(
        "q/k norm (no key)",
        ("olmo2",),
        READ,
        "fixed by model_type: RMSNorm over the whole q and k projections (q_norm of heads x "
        "head_dim, k_norm of kv heads x head_dim) before RoPE",
    ),
    FieldRule(
        "embedding scale (no key)",
        ("granite",),
        READ,
        "embedding_multiplier (above)",
    ),
    FieldRule(
        "embedding scale (no key)",
        NOT_GRANITE_OR_GEMMA,
        NO_EFFECT,
        "fixed by model_type: embeddings are not scaled",
    ),
    FieldRule(
        "embedding scale (no key)",
        GEMMA,
        READ,
        "fixed by model_type: embeddings times sqrt(hidden_size), the factor rounded to the "
        "embedding's dtype first",
    ),
    FieldRule(
        "activation (no key)",
        NOT_GEMMA,
        NO_EFFECT,
        "fixed by model_type: SiLU (hidden_act, above, may only name it)",
    ),
    FieldRule(
        "resid_pdrop",
        ("phi3",),
        REFUSED,
        "0 (transformers' Phi-3 drops out each branch's output in training; assay trains "
        "without dropout)",
        accepts=lambda v: v is ABSENT or _zero(v),
    ),
    FieldRule(
        "embd_pdrop",
        ("phi3",),
        REFUSED,
        "a number (transformers 5 types it so, and then ignores it)",
        accepts=lambda v: v is ABSENT or _number(v),
    ),
    FieldRule(
        "original_max_position_embeddings",
        ("phi3",),
        REFUSED,
        "an integer (transformers 5 types it so; only longrope, which is refused, reads it)",
        accepts=lambda v: v is ABSENT or (isinstance(v, int) and not isinstance(v, bool)),
    ),
    FieldRule(
        "projection layout (no key)",
        NOT_PHI3,
        NO_EFFECT,
        "fixed by model_type: q_proj, k_proj, v_proj, gate_proj and up_proj apart",
    ),
    FieldRule(
        "projection layout (no key)",
        ("phi3",),
        READ,
        "fixed by model_type: q, k and v in one qkv_proj (q's rows, then k's, then v's), gate and "
        "up in one gate_up_proj (gate's rows first); adapters wrap each fused projection whole, "
        "as PEFT does",
    ),
    FieldRule("pretraining_tp", ALL, NO_EFFECT, "ignored as transformers 5 ignores it"),
    FieldRule("torch_dtype, dtype", ALL, NO_EFFECT, "storage is chosen by the run's settings"),
)


def rules_for(family: str) -> tuple[FieldRule, ...]:
    """The rows that apply to ``family``."""
    return tuple(rule for rule in RULES if family in rule.families)


def check_refused_fields(hf: Mapping[str, Any], family: str, where: str) -> None:
    """UnsupportedModelError naming ``where``, the key and the value for the first field of
    ``hf`` whose value ``family``'s rows refuse; nothing for a file assay computes as written."""
    for rule in rules_for(family):
        if rule.accepts is None:
            continue
        value = rule.read(hf)
        if not rule.accepts(value):
            raise UnsupportedModelError(
                f"{where}: {rule.key} {value!r} is not supported for {family}; "
                f"expected {rule.expected}"
            )
