"""The model families: every ``model_type`` assay reads, and what each one is, declared once.

An entry holds the facts the config reader, the decoder, the loaders and the exporters ask of a
family: transformers' defaults for the keys its ``config.json`` may leave out, how it reads an
attention window, the shape of its layer (norms, q/k norms, activation, fused projections) and
how its GGUF is stored. Code asks an entry (``config.family.sandwich_norm``) rather than
comparing names (``tests/test_registries.py`` holds every module but this one and
``hf_fields``, the table of each family's config.json keys, to that), so a new family is one
entry here plus the code of whatever it does that no entry describes yet. ``window_reading
"per_kind"`` is Gemma 3's config format as a whole: per-kind ropes and windows, and the keys
its export writes. It imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

# How a family reads its attention window from config.json, as transformers does:
# - "none": never (every layer attends to the whole context);
# - "every_layer": ``sliding_window`` binds every layer when set (Mistral, Phi-3);
# - "qwen": ``use_sliding_window`` with ``max_window_layers`` or ``layer_types`` picks the
#   sliding layers, and assay refuses a file that would mix the two kinds;
# - "per_kind": ``layer_types`` names each layer's kind, and each kind has its own rope (Gemma 3).
WINDOW_READINGS = ("none", "every_layer", "qwen", "per_kind")
RMS_NORM_EPS = 1e-6
# the kinds a layer's attention may be, as config.json's layer_types names them
LAYER_KINDS = ("full_attention", "sliding_attention")


@dataclass(frozen=True)
class Family:
    """One model family, named by its ``config.json`` ``model_type``."""

    name: str
    #: max_position_embeddings when config.json leaves it out (a Llama-3 rope without its own
    #: original context takes this one)
    context: int
    #: rms_norm_eps when config.json leaves it out
    rms_norm_eps: float = RMS_NORM_EPS
    #: head_dim when config.json leaves it out; None: hidden / heads
    head_dim: int | None = None
    #: transformers' model reads a null head_dim as that default (elsewhere null is refused)
    null_head_dim_is_default: bool = False
    #: pad_token_id when config.json leaves it out
    pad_token: int | None = None
    #: tie_word_embeddings when config.json leaves it out
    tied: bool = False
    #: how the window is read (WINDOW_READINGS)
    window_reading: str = "none"
    #: the window of an "every_layer" family when config.json leaves sliding_window out
    default_window: int | None = None
    #: q, k and v carry a bias whatever the file says (Qwen2)
    attention_bias: bool = False
    #: q and k are RMS-normalised before RoPE: None, "per_head" (a weight of head_dim) or
    #: "whole" (a weight of the whole projection)
    qk_norm: str | None = None
    #: each branch's output is normalised before its residual add instead of its input
    #: (OLMo 2)
    post_norm: bool = False
    #: each branch's input and output are normalised: four norms per layer (Gemma 3)
    sandwich_norm: bool = False
    #: RMSNorm multiplies by its weight in fp32 before casting back (Llama casts first)
    norm_weight_in_fp32: bool = False
    #: RMSNorm's weight is stored as an offset from 1: x * (1 + w) (Gemma's)
    offset_norm: bool = False
    #: embeddings are multiplied by sqrt(hidden_size), rounded to the embedding's dtype
    scaled_embeddings: bool = False
    #: the MLP gate's activation: "silu", or "gelu_tanh" (GELU, tanh approximation)
    activation: str = "silu"
    #: q, k, v in one projection (qkv_proj: q's rows, then k's, then v's) and gate, up in
    #: another (gate_up_proj: gate's rows first), as Phi-3 stores them; an adapter wraps each
    #: fused projection whole, as PEFT does
    fused_projections: bool = False
    #: Granite's four scalars (embedding, residual, attention and logits multipliers)
    scalars: bool = False
    #: the bias switches its transformers config holds (written false on export: assay reads
    #: none of them true)
    bias_keys: tuple[str, ...] = ()
    #: another family's layout under another name (Mistral is Llama's: its window is a
    #: setting); llama.cpp files it under that family
    layout_of: str | None = None
    #: its GGUF is read and written, under this name as general.architecture
    gguf: bool = False
    #: llama.cpp stores its GGUF's Q and K rows permuted (its Llama conversion, Granite's too)
    permuted_gguf: bool = False

    @property
    def layout(self) -> str:
        """The family whose layout this one is (itself unless ``layout_of``)."""
        return self.layout_of or self.name


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "llama",
            context=2048,
            null_head_dim_is_default=True,
            bias_keys=("attention_bias", "mlp_bias"),
            gguf=True,
            permuted_gguf=True,
        ),
        Family(
            "mistral",
            context=131072,
            null_head_dim_is_default=True,
            window_reading="every_layer",
            default_window=4096,
            layout_of="llama",
        ),
        Family("qwen2", context=32768, window_reading="qwen", attention_bias=True, gguf=True),
        Family(
            "qwen3",
            context=32768,
            head_dim=128,
            window_reading="qwen",
            qk_norm="per_head",
            bias_keys=("attention_bias",),
            gguf=True,
        ),
        Family(
            "granite",
            context=2048,
            scalars=True,
            bias_keys=("attention_bias", "mlp_bias"),
            gguf=True,
            permuted_gguf=True,
        ),
        Family(
            "olmo2",
            context=2048,
            rms_norm_eps=1e-5,
            qk_norm="whole",
            post_norm=True,
            norm_weight_in_fp32=True,
            bias_keys=("attention_bias",),
        ),
        Family(
            "phi3",
            context=4096,
            rms_norm_eps=1e-5,
            pad_token=32000,
            window_reading="every_layer",
            fused_projections=True,
        ),
        Family(
            "gemma3_text",
            context=131072,
            head_dim=256,
            pad_token=0,
            tied=True,
            window_reading="per_kind",
            qk_norm="per_head",
            sandwich_norm=True,
            norm_weight_in_fp32=True,
            offset_norm=True,
            scaled_embeddings=True,
            activation="gelu_tanh",
            bias_keys=("attention_bias",),
        ),
    )
}
NAMES: tuple[str, ...] = tuple(FAMILIES)
# the general.architecture values read from GGUF (llama.cpp files Mistral under llama; OLMo 2's,
# Phi-3's and Gemma 3's GGUF are neither read nor written)
GGUF_NAMES: tuple[str, ...] = tuple(name for name, f in FAMILIES.items() if f.gguf)
