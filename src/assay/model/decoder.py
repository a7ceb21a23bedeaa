"""One Llama-family decoder that config switches between Llama/SmolLM2, Mistral, Qwen2, Qwen3,
Granite, OLMo 2, Phi-3 and Gemma 3.

Reads top to bottom: RMSNorm, rotary tables, attention, MLP, a layer, the decoder. Parameter
names follow HF's (minus the ``model.`` prefix) so that PEFT-style keys map one to one.
Projections are called as modules, so storage and adapters can replace them in place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from assay.model.cache import KVCache, LayerCache, cached_attention_mask
from assay.model.config import ModelConfig

if TYPE_CHECKING:
    from assay.model.loader import Fingerprint


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps), computed in fp32, cast back, then times weight; with
    ``weight_in_fp32`` (OLMo 2's, Gemma's) times weight in fp32, then cast back. The two orders
    differ only when the compute dtype is narrower than fp32. With ``offset`` 1 (Gemma's) the
    stored weight w scales by 1 + w."""

    def __init__(
        self, dim: int, eps: float, weight_in_fp32: bool = False, offset: float = 0.0
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.full((dim,), 1.0 - offset))
        self.eps = eps
        self.weight_in_fp32 = weight_in_fp32
        self.offset = offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.offset:
            return (h * (self.offset + self.weight.float())).to(x.dtype)
        if self.weight_in_fp32:
            return (self.weight * h).to(x.dtype)
        return self.weight * h.to(x.dtype)


def rms_norm(config: ModelConfig, dim: int) -> RMSNorm:
    """The family's RMSNorm over ``dim`` features."""
    return RMSNorm(
        dim,
        config.rms_norm_eps,
        weight_in_fp32=config.norm_weight_in_fp32,
        offset=config.norm_offset,
    )


def rope_inverse_frequencies(
    config: ModelConfig, device: torch.device | None = None, kind: str | None = None
) -> torch.Tensor:
    """theta^(-2k/d) for k < d/2 in fp32, with Llama-3 scaling or GGUF divisors applied; the
    theta of the layers of ``kind`` (Gemma 3's sliding layers have their own)."""
    d = config.head_dim
    theta = config.rope_theta_of(kind)
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64, device=device).float() / d))
    if config.rope_freq_divisors is not None:
        return inv / torch.tensor(config.rope_freq_divisors, dtype=torch.float32, device=device)
    scaling = config.rope_scaling
    if scaling is None:
        return inv
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    wavelength = 2 * torch.pi / inv
    # Short wavelengths keep their frequency, long ones divide by factor, the band between blends.
    scaled = torch.where(wavelength > original / low, inv / factor, inv)
    smooth = (original / wavelength - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    in_band = (wavelength >= original / high) & (wavelength <= original / low)
    return torch.where(in_band, blended, scaled)


def rope_tables(
    config: ModelConfig, positions: torch.Tensor, dtype: torch.dtype, kind: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape [B, 1, T, head_dim] for positions [B, T], in the rotate-half layout,
    for the layers of ``kind``."""
    inv = rope_inverse_frequencies(config, positions.device, kind)
    freqs = positions.float()[..., None] * inv
    angles = torch.cat((freqs, freqs), dim=-1)[:, None]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


class Attention(nn.Module):
    """Grouped-query attention through SDPA with the softmax in fp32; with ``qk_norm`` q and k
    are RMS-normalised before RoPE, each head alone (Qwen3) or each projection whole (OLMo 2);
    with ``fused_projections`` (Phi-3) q, k and v come from one ``qkv_proj``, in that order."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        h, bias = config.hidden_size, config.attention_bias
        if config.fused_projections:
            self.qkv_proj = nn.Linear(h, config.q_size + 2 * config.kv_size, bias=bias)
        else:
            self.q_proj = nn.Linear(h, config.q_size, bias=bias)
            self.k_proj = nn.Linear(h, config.kv_size, bias=bias)
            self.v_proj = nn.Linear(h, config.kv_size, bias=bias)
        self.o_proj = nn.Linear(config.q_size, h, bias=False)
        if config.qk_norm:
            q_width, k_width = config.qk_norm_widths
            self.q_norm = rms_norm(config, q_width)
            self.k_norm = rms_norm(config, k_width)
        self.whole_qk_norm = config.whole_qk_norm

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor | None,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        """With ``cache``, x holds only the new positions: their keys and values are appended
        and the queries attend over the whole cached run (``mask`` must then be explicit)."""
        c = self.config
        b, t, _ = x.shape
        q, k, v = self._qkv(x)
        if self.whole_qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(b, t, c.num_heads, c.head_dim)
        k = k.view(b, t, c.num_kv_heads, c.head_dim)
        if c.qk_norm and not self.whole_qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(b, t, c.num_kv_heads, c.head_dim).transpose(1, 2)
        cos, sin = rope
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.extend(k, v)
        group = c.num_heads // c.num_kv_heads
        if group > 1:
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        q, k, v = q.float(), k.float(), v.float()
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            is_causal=mask is None,
            scale=c.attention_scale,
        ).to(x.dtype)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, c.q_size))

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The q, k and v projections of ``x``, from three projections or from slices of one."""
        if not self.config.fused_projections:
            return self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q_size, kv_size = self.config.q_size, self.config.kv_size
        return self.qkv_proj(x).split((q_size, kv_size, kv_size), dim=-1)


def _gated_product(
    activation: Callable[[torch.Tensor], torch.Tensor],
    activation_backward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    name: str,
) -> type[torch.autograd.Function]:
    """An autograd function for ``activation(gate) * up`` that saves only its inputs: the
    activation is recomputed in backward, so a layer keeps two FFN-wide tensors instead of
    autograd's three (the activation's input and output, up), and one (gate) when only up needs
    a gradient. ``activation_backward(grad, gate)`` is the activation's aten backward.

    Guarantees: the output and both gradients equal those of ``activation(gate) * up`` bit for
    bit (the same aten ops on the same operands; IEEE products commute), and backward holds no
    more FFN-wide tensors at once than autograd's (the up gradient forms in the recomputed
    activation, after the gate's temporary is freed).
    """

    def forward(ctx, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        # up is needed only for gate's gradient; gate for either (the activation is recomputed)
        ctx.save_for_backward(gate, up if ctx.needs_input_grad[0] else None)
        return activation(gate) * up

    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        gate, up = ctx.saved_tensors
        grad_gate = grad_up = None
        # gate's gradient first, so its temporary (grad * up) is gone before up's forms
        if ctx.needs_input_grad[0]:
            grad_gate = activation_backward(grad * up, gate)
        if ctx.needs_input_grad[1]:
            grad_up = activation(gate).mul_(grad)
        return grad_gate, grad_up

    methods = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    return type(name, (torch.autograd.Function,), methods)


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def _gelu_tanh_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.gelu_backward(grad, x, approximate="tanh")


_SiluMul = _gated_product(F.silu, torch.ops.aten.silu_backward, "_SiluMul")
_GeluTanhMul = _gated_product(_gelu_tanh, _gelu_tanh_backward, "_GeluTanhMul")
GATED_PRODUCTS = {"silu": _SiluMul, "gelu_tanh": _GeluTanhMul}


class MLP(nn.Module):
    """down(act(gate(x)) * up(x)), act SiLU or (Gemma's) tanh-approximated GELU; the product
    saves only gate(x) and up(x) (_gated_product). With ``fused_projections`` (Phi-3) gate and
    up are the two halves of one ``gate_up_proj``."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        h, f = config.hidden_size, config.intermediate_size
        self.gated_product = GATED_PRODUCTS[config.activation]
        self.fused = config.fused_projections
        if self.fused:
            self.gate_up_proj = nn.Linear(h, 2 * f, bias=False)
        else:
            self.gate_proj = nn.Linear(h, f, bias=False)
            self.up_proj = nn.Linear(h, f, bias=False)
        self.down_proj = nn.Linear(f, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(self.gated_product.apply(gate, up))


class DecoderLayer(nn.Module):
    """Pre-norm attention then pre-norm MLP, each with a residual (each branch scaled by
    Granite's ``residual_multiplier`` where it is not 1). With ``post_norm`` (OLMo 2) each
    branch takes the residual stream as it is and its output is normalised before the add:
    ``post_attention_layernorm`` after attention, ``post_feedforward_layernorm`` after the MLP
    (transformers' names, so the weights map one to one). With ``sandwich_norm`` (Gemma 3) each
    branch's input and output are normalised: ``input_layernorm`` and
    ``post_attention_layernorm`` around attention, ``pre_feedforward_layernorm`` and
    ``post_feedforward_layernorm`` around the MLP.

    ``kind`` is the layer's attention kind (:attr:`ModelConfig.layer_kinds`): where a model has
    two, ``rope`` and ``mask`` map each kind to its tables and mask, and the layer takes its own.
    """

    def __init__(self, config: ModelConfig, kind: str | None = None) -> None:
        super().__init__()
        h = config.hidden_size
        self.kind = kind
        self.post_norm, self.sandwich_norm = config.post_norm, config.sandwich_norm
        if not self.post_norm:
            self.input_layernorm = rms_norm(config, h)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = rms_norm(config, h)
        if self.sandwich_norm:
            self.pre_feedforward_layernorm = rms_norm(config, h)
        self.mlp = MLP(config)
        if self.post_norm or self.sandwich_norm:
            self.post_feedforward_layernorm = rms_norm(config, h)
        self.residual_multiplier = config.residual_multiplier

    def _branch(self, out: torch.Tensor) -> torch.Tensor:
        return out if self.residual_multiplier == 1.0 else out * self.residual_multiplier

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor] | Mapping[str, tuple[torch.Tensor, torch.Tensor]],
        mask: torch.Tensor | Mapping[str, torch.Tensor | None] | None,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        # tables and masks come by kind only to a model whose layers have kinds
        if isinstance(rope, Mapping):
            rope = rope[cast(str, self.kind)]
        if isinstance(mask, Mapping):
            mask = mask[cast(str, self.kind)]
        if self.sandwich_norm:
            attended = self.self_attn(self.input_layernorm(x), rope, mask, cache)
            x = x + self.post_attention_layernorm(attended)
            fed = self.mlp(self.pre_feedforward_layernorm(x))
            return x + self.post_feedforward_layernorm(fed)
        if self.post_norm:
            x = x + self.post_attention_layernorm(self.self_attn(x, rope, mask, cache))
            return x + self.post_feedforward_layernorm(self.mlp(x))
        x = x + self._branch(self.self_attn(self.input_layernorm(x), rope, mask, cache))
        return x + self._branch(self.mlp(self.post_attention_layernorm(x)))


def attention_mask(
    config: ModelConfig,
    seq_len: int,
    padding: torch.Tensor | None,
    device: torch.device,
    kind: str | None = None,
) -> torch.Tensor | None:
    """A boolean [B or 1, 1, T, T] mask (True = attend), or None for plain causal attention,
    for the layers of ``kind``.

    Padding masks use 1 for real tokens. A sliding window only bites past its length.
    """
    window = config.window_of(kind)
    if padding is None and (window is None or seq_len <= window):
        return None
    i = torch.arange(seq_len, device=device)
    allowed = i[None, :] <= i[:, None]
    if window is not None and seq_len > window:
        allowed = allowed & (i[:, None] - i[None, :] < window)
    allowed = allowed[None, None]
    if padding is not None:
        allowed = allowed & padding.bool()[:, None, None, :]
        # A fully padded query row would softmax over nothing; let it see itself.
        allowed = allowed | torch.eye(seq_len, dtype=torch.bool, device=device)
    return allowed


class Decoder(nn.Module):
    """The Llama-family causal LM. ``forward`` returns fp32 logits [B, T, vocab]."""

    # An nn.Embedding and an nn.Linear as built; storage may swap in its frozen layers.
    embed_tokens: nn.Module
    lm_head: nn.Module
    # Set on a loaded model by the loader and the layers above it, which read them back.
    fingerprint: Fingerprint
    assay_source: Path
    assay_base_model: dict[str, str | None]
    # The AdapterSpec that ``assay.adapters.attach`` records: adapters sit above the model, so
    # it is not named here.
    assay_adapter_spec: object

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, kind) for kind in config.layer_kinds)
        self.norm = rms_norm(config, config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        # Gradient checkpointing: keep only each layer's input and recompute it in backward.
        self.gradient_checkpointing = False

    def prepare(
        self,
        input_ids: torch.Tensor,
        attention_mask_2d: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any, Any]:
        """Embeddings (scaled where the family scales them), rotary tables and the attention
        mask: everything a layer needs. A model whose layers are of two kinds (Gemma 3) gets a
        table and a mask per kind, by kind (:class:`DecoderLayer` takes its own)."""
        x = self.embed(input_ids)
        b, t = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(t, device=input_ids.device).expand(b, t)
        device = input_ids.device

        def per_kind(kind: str | None) -> tuple[tuple[torch.Tensor, torch.Tensor], Any]:
            rope = rope_tables(self.config, position_ids, x.dtype, kind)
            return rope, attention_mask(self.config, t, attention_mask_2d, device, kind)

        return x, *self._by_kind(per_kind)

    def _by_kind(self, build: Callable[[str | None], tuple[Any, Any]]) -> tuple[Any, Any]:
        """(rope, mask) from ``build(kind)``: as built for a model of one kind, else a dict of
        each per kind."""
        kinds = sorted(set(self.config.layer_types or ()))
        if not kinds:
            return build(None)
        built = {kind: build(kind) for kind in kinds}
        return {k: v[0] for k, v in built.items()}, {k: v[1] for k, v in built.items()}

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The token embeddings the first layer takes: Granite multiplies them by its
        ``embedding_multiplier``; Gemma by sqrt(hidden_size) rounded to their dtype first, as
        transformers does."""
        x = self.embed_tokens(input_ids)
        if self.config.scaled_embeddings:
            return x * torch.tensor(self.config.hidden_size**0.5, dtype=x.dtype)
        scale = self.config.embedding_multiplier
        return x if scale == 1.0 else x * scale

    def head_input(self, x: torch.Tensor) -> torch.Tensor:
        """The last layer's output as the LM head takes it: final-normed and, for Granite,
        divided by ``logits_scaling`` (the head is linear, so its logits are divided alike; the
        training losses, which read these states beside the head's weight, see it too)."""
        h = self.norm(x)
        scaling = self.config.logits_scaling
        return h if scaling == 1.0 else h / scaling

    def hidden_states(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The LM head's input [B, T, hidden] (``head_input``: final-normed)."""
        x, rope, mask = self.prepare(input_ids, attention_mask, position_ids)
        for layer in self.layers:
            if self.gradient_checkpointing and torch.is_grad_enabled():
                x = checkpoint(layer, x, rope, mask, use_reentrant=False)
            else:
                x = layer(x, rope, mask)
        return self.head_input(x)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.lm_head(self.hidden_states(input_ids, attention_mask, position_ids)).float()

    def forward_cached(
        self,
        input_ids: torch.Tensor,
        cache: KVCache,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
    ) -> torch.Tensor:
        """fp32 logits [B, T, vocab] of the T new positions in ``input_ids``, appending their
        keys and values to ``cache``.

        ``attention_mask`` [B, cache.length + T] covers every position so far (1 = real
        token); ``position_ids`` [B, T] are the new positions' rotary positions. Inference
        only: the training forward above never takes this path.
        """
        x = self.embed(input_ids)
        t = input_ids.shape[1]

        def per_kind(kind: str | None) -> tuple[tuple[torch.Tensor, torch.Tensor], Any]:
            rope = rope_tables(self.config, position_ids, x.dtype, kind)
            window = self.config.window_of(kind)
            return rope, cached_attention_mask(window, cache.length, t, attention_mask, x.device)

        rope, mask = self._by_kind(per_kind)
        for layer, layer_cache in zip(self.layers, cache.layers, strict=True):
            x = layer(x, rope, mask, layer_cache)
        cache.length += t
        return self.lm_head(self.head_input(x)).float()
