"""Peak device bytes of one training step, predicted from a plan's numbers alone (no torch).

The prediction is a formula over the plan, derived from how assay allocates (decoder.py,
train/losses.py, stream/engine.py, storage/linear.py, storage/nf4.py) and checked by
gate-memory against profiler measurements. Its target is the *device peak*: the static bytes
the run keeps on the compute side (weights or stream slots, adapters, AdamW state) plus the
tensor-level peak of one optimizer step (forward, loss, backward, AdamW) after a warm-up.

The step peak is the largest of a few moments: the loss backward (every activation alive plus
the loss's transients), the last layer's backward (activations plus the gradient flowing in
and the MLP backward's temporaries or a dequantized weight tile) and the optimizer step.
Activation counts per token follow what autograd saves, e.g. for one decoder layer whose
input needs a gradient: its input and the post-attention residual (RMSNorm saves its input
and its rsqrt), q, k and v after RoPE/GQA repetition and SDPA's output (each q_size wide: GQA
repeats k and v to num_heads), SDPA's logsumexp (one float per head), the gate and up
projections' outputs (two FFN-wide tensors: SiLU is recomputed in backward), the normed input
of an adapted projection group, and each adapter's rank-wide A x.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, cast

from assay.model.config import SIZE_FIELDS, ModelConfig
from assay.settings import DEFAULT_TARGETS, PREFERENCE_LOSSES, default
from assay.settings.methods import method
from assay.settings.storages import Storage, storage

ATTENTION = DEFAULT_TARGETS
MLP = ("gate_proj", "up_proj", "down_proj")
TILE_BYTES = 4 << 20  # storage.linear.DEFAULT_TILE_BYTES: decoded weight per tile
NF4_NESTED_BLOCK, STREAM_ALIGN = 256, 64  # double-quant scales per block; stream/layout
LSE_ROWS = 16  # rows per logsumexp call in chunked CE (train/losses.py)
PREFERENCE = PREFERENCE_LOSSES
HALF_DTYPES = ("bfloat16", "bf16", "float16")  # compute dtypes of 2 bytes
OPTIMIZERS = ("adamw", "adamw8bit", "paged_adamw8bit")
# The model config's fields that size memory: a plan's JSON holds these alone.
SHAPE_FIELDS = (*SIZE_FIELDS, "tie_word_embeddings", "attention_bias", "qk_norm", "architecture")
TERMS = (
    "weights",
    "adapter",
    "gradients",
    "optimizer",
    "activations",
    "logits_and_loss",
    "workspace",
    "allocator_slack",
)


def shape(
    vocab_size: int,
    hidden_size: int,
    intermediate_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    tie_word_embeddings: bool = True,
    attention_bias: bool = False,
    qk_norm: bool = False,
    architecture: str = "llama",
) -> ModelConfig:
    """A ``ModelConfig`` of this shape and family's layout (Llama's unless named; with Qwen2's
    q, k, v bias and a q/k norm when asked): all a prediction reads of a model."""
    return ModelConfig(
        architecture,
        vocab_size,
        hidden_size,
        intermediate_size,
        num_layers,
        num_heads,
        num_kv_heads,
        head_dim,
        tie_word_embeddings=tie_word_embeddings,
        attention_bias=attention_bias,
        qk_norm=qk_norm,
    )


@dataclass(frozen=True)
class Plan:
    """Everything the prediction depends on. ``stream_buffers`` None means resident;
    ``stream_recompute`` False means a streamed run keeps every activation, as resident does.
    """

    model: ModelConfig
    storage: str = "float32"
    method: str = "lora"
    rank: int = default("adapter.rank", "lora")  # the LoRA family's; TinyLoRA's r (SVD rank)
    targets: tuple[str, ...] = ATTENTION
    stream_buffers: int | None = None
    stream_recompute: bool = True
    seq_len: int = default("data.seq_len")
    micro_batch: int = 1
    grad_accum: int = 1
    gradient_checkpointing: bool = False
    loss: str = "ce"
    chunk_size: int = default("loss.chunk_size", "chunked_ce")
    optimizer: str = "adamw"
    compute_dtype: str = "float32"
    tiny_u: int = default("adapter.u", "tinylora")  # trainable scalars per sharing group
    tiny_sharing: str = default("adapter.sharing", "tinylora")  # one vector, or one per target

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["model"] = {k: getattr(self.model, k) for k in SHAPE_FIELDS}  # what sizes memory
        out["targets"] = list(self.targets)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        body = dict(data)
        body["model"] = shape(**body["model"])
        body["targets"] = tuple(body.get("targets", ATTENTION))
        return cls(**body)


@dataclass(frozen=True)
class Prediction:
    """Predicted device peak in bytes, its named terms (summing to it) and the peak moment."""

    total: int
    terms: dict[str, int]
    peak_phase: str
    scope: str
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_bytes": self.total,
            "terms": dict(self.terms),
            "peak_phase": self.peak_phase,
            "scope": self.scope,
            "notes": list(self.notes),
        }


def _projections(d: ModelConfig) -> dict[str, tuple[int, int]]:
    """(out, in) of every projection of one layer."""
    q, kv = d.num_heads * d.head_dim, d.num_kv_heads * d.head_dim
    h, f = d.hidden_size, d.intermediate_size
    return {
        "q_proj": (q, h),
        "k_proj": (kv, h),
        "v_proj": (kv, h),
        "o_proj": (h, q),
        "gate_proj": (f, h),
        "up_proj": (f, h),
        "down_proj": (h, f),
    }


def _layer_vectors(d: ModelConfig) -> list[int]:
    """Element counts of one layer's one-dimensional base tensors: the RMSNorm weights (two,
    Gemma 3's four), the q and k norms (Qwen3's and Gemma's per head, OLMo 2's over the whole
    projections) and Qwen2's q, k and v biases."""
    q, kv = d.num_heads * d.head_dim, d.num_kv_heads * d.head_dim
    found = [d.hidden_size] * (4 if d.sandwich_norm else 2)
    if d.qk_norm:
        found += list(d.qk_norm_widths)
    if d.attention_bias:
        found += [q, kv, kv]
    return found


def _stored_bytes(rows: int, cols: int, held: Storage) -> int:
    """Bytes a frozen projection's store holds (NF4 code tables are counted per model)."""
    n = rows * cols
    # a float store sets element_bytes, a quantized one code_bits and block
    if not held.quantized:
        return cast(int, held.element_bytes) * n
    blocks = -(-n // cast(int, held.block))
    packed = -(-n * cast(int, held.code_bits) // 8)
    if not held.double_quant:
        return packed + 4 * blocks
    return packed + blocks + 4 * -(-blocks // NF4_NESTED_BLOCK) + 4  # codes, absmax2, offset


def _code_tables(held: Storage) -> int:
    """Shared per-device NF4 tables: the 16-entry NF4 map and, with double quant, 256 codes."""
    if not held.quantized:
        return 0
    return 64 + (1024 if held.double_quant else 0)


def _layer_block_bytes(d: ModelConfig, held: Storage) -> int:
    """One layer's streamed block: every base tensor 64-byte aligned (stream/layout.py)."""

    def aligned(n: int) -> int:
        return -(-n // STREAM_ALIGN) * STREAM_ALIGN

    sizes = [4 * n for n in _layer_vectors(d)]  # norms and biases stay fp32
    for rows, cols in _projections(d).values():
        n = rows * cols
        if not held.quantized:
            sizes.append(_stored_bytes(rows, cols, held))
            continue
        # a quantized store sets code_bits and block
        blocks = -(-n // cast(int, held.block))
        sizes += [-(-n * cast(int, held.code_bits) // 8), 64]  # packed codes, the NF4 map
        if not held.double_quant:
            sizes.append(4 * blocks)
        else:
            sizes += [blocks, 4 * -(-blocks // NF4_NESTED_BLOCK), 1024, 4]
    return sum(aligned(s) for s in sizes)


def _trainables(plan: Plan) -> list[int]:
    """Element counts of every trainable tensor."""
    d, entry = plan.model, method(plan.method)
    if entry.trains_base:
        embed = [d.vocab_size * d.hidden_size] * (1 if d.tie_word_embeddings else 2)
        per_layer = [r * c for r, c in _projections(d).values()] + _layer_vectors(d)
        return embed + per_layer * d.num_layers + [d.hidden_size]
    shapes = _projections(d)
    if entry.svd_basis:  # only v trains: one vector, or one per adapted projection
        if plan.tiny_sharing == "global":
            return [plan.tiny_u]
        return [plan.tiny_u] * len(plan.targets) * d.num_layers
    found = []
    for name in plan.targets:
        rows, cols = shapes[name]
        a, b = plan.rank * cols, rows * plan.rank
        found += [a, b] if entry.first_factor_trains else [b]  # LoRA-FA's A is frozen
        if entry.magnitude:
            found.append(rows)  # magnitude vector
    return found * d.num_layers


def _frozen_adapter_bytes(plan: Plan) -> int:
    """Adapter tensors that do not train but live beside the base: LoRA-FA's A; TinyLoRA's
    U (out x r), S (r), V^T (r x in) and random projections P (u x r x r), per target."""
    entry = method(plan.method)
    if entry.trains_base or entry.first_factor_trains:
        return 0
    shapes, r = _projections(plan.model), plan.rank
    per_layer = 0
    for name in plan.targets:
        rows, cols = shapes[name]
        if entry.svd_basis:
            per_layer += 4 * (rows * r + r + r * cols + plan.tiny_u * r * r)
        else:
            per_layer += 4 * r * cols
    return per_layer * plan.model.num_layers


def _optimizer_bytes(plan: Plan, counts: list[int]) -> int:
    """AdamW: two fp32 moments per element and a 4-byte step per tensor. 8-bit (bitsandbytes
    blockwise, basis not measured here): one byte per moment plus an fp32 absmax per 256."""
    if plan.optimizer == "adamw":
        return sum(8 * n + 4 for n in counts)
    return sum(2 * n + 8 * -(-n // 256) + 4 for n in counts)


def _layer_saved(plan: Plan, input_needs_grad: bool) -> float:
    """Bytes per token one layer's autograd graph keeps (see the module docstring).

    With a frozen input (layer 0 of a resident run: the embedding is frozen) a part saves
    only once something before it, or its own adapter, needs a gradient.
    """
    d, e, entry = plan.model, _elem(plan), method(plan.method)
    h, f, q = d.hidden_size, d.intermediate_size, d.num_heads * d.head_dim
    full = entry.trains_base
    targets = set(_projections(d)) if full else set(plan.targets)
    norm = 4 * h + 4 if e == 2 else e * h + 4  # RMSNorm saves its fp32 view and the rsqrt
    qkv = bool(targets & {"q_proj", "k_proj", "v_proj"})
    attention_grad = input_needs_grad or qkv  # q, k, v (and SDPA's inputs) need a gradient
    residual_grad = attention_grad or "o_proj" in targets
    mlp_grad = residual_grad or bool(targets & {"gate_proj", "up_proj"})
    # an adapter whose first factor is frozen (LoRA-FA's A, TinyLoRA's V^T) needs no copy of
    # its input for a weight gradient: only its own rank-wide product is kept
    keeps_input = entry.first_factor_trains
    saved = norm if input_needs_grad else 0.0
    if qkv and keeps_input:
        saved += e * h  # normed input kept for the adapters' (or weights') gradients
    if attention_grad:
        attn = 4 if e == 2 else e  # SDPA runs on fp32 copies of q, k and v
        saved += 4 * attn * q + 4 * d.num_heads  # q, k, v, output; logsumexp
        if d.qk_norm:
            # each head's q and k norm saves its fp32 input and rsqrt (and, when the norm
            # weights train, its normed output)
            kv = d.num_kv_heads * d.head_dim
            saved += 4 * (q + kv) + 4 * (d.num_heads + d.num_kv_heads)
            saved += e * (q + kv) if full else 0
        if e == 2 and "o_proj" in targets:
            saved += e * q  # the output cast back to the compute dtype
    elif "o_proj" in targets and keeps_input:
        saved += e * q  # SDPA's output, kept for the o_proj adapter's gradient
    if residual_grad:
        # the MLP's input norm (Gemma's norms on the branches' outputs keep no more: measured
        # on a tiny gemma3_text shape, 58.84 MB against 58.89 for the same shape with q/k norms)
        saved += norm
    if targets & {"gate_proj", "up_proj"} and keeps_input:
        saved += e * h
    # decoder._SiluMul keeps gate's output (silu is recomputed) and, for gate's gradient, up's
    saved += e * f * (int(mlp_grad) + int(residual_grad or "gate_proj" in targets))
    if "down_proj" in targets and keeps_input:
        saved += e * f
    if not full:
        saved += 4 * plan.rank * len(targets)  # each adapter's A x
    if entry.magnitude:
        # the magnitude's gradient keeps both terms it rescales (base and LoRA outputs)
        shapes = _projections(d)
        saved += 2 * e * sum(shapes[t][0] for t in targets)
    return saved


def _elem(plan: Plan) -> int:
    return 2 if plan.compute_dtype in HALF_DTYPES else 4


def _tile_workspace(plan: Plan) -> int:
    """Decoded weight of the largest frozen tile (storage.linear, storage.nf4.workspace_bytes)."""
    held = storage(plan.storage)
    if held.keeps_parameters:
        return 0
    best = 0
    for rows, cols in _projections(plan.model).values():
        fit = max(TILE_BYTES // (cols * 4), 1)
        # block is read only where quantized, which sets it
        align = (
            cast(int, held.block) // math.gcd(cast(int, held.block), cols) if held.quantized else 1
        )
        tile = min(max(fit // align, 1) * align, rows)
        scales = (-(-tile * cols // cast(int, held.block)) + 1) * 4 if held.quantized else 0
        best = max(best, tile * cols * 4 + scales)
    return best


def _loss_terms(plan: Plan, tokens: int) -> tuple[float, float, float]:
    """(saved until the loss backward, forward transient, backward transient) in bytes."""
    d = plan.model
    v, h = d.vocab_size, d.hidden_size
    if plan.loss == "chunked_ce":
        c = min(plan.chunk_size, tokens)
        lse = 4 * min(c, LSE_ROWS) * v  # logsumexp's workspace, LSE_ROWS rows at a time
        chunk = 4 * (c * v + tokens * h + 2 * c * h)  # logits/probs, grad_h, chunk rows
        if not method(plan.method).trains_base:
            # Frozen head: grad_h is formed in the forward (the hidden states themselves are
            # the head input kept above); grad_h and its scaled copy meet in the backward.
            return tokens * (8 + 8), chunk + lse, 8 * tokens * h
        saved = tokens * (4 * h + 8 + 4 + 8)  # hidden, scored index, logsumexp, labels
        forward = 4 * c * v + lse  # a chunk's logits and logsumexp's workspace
        return saved, forward, chunk
    saved = tokens * (4 * v + 8 + 4 + 8)  # log_softmax output, targets, per-token loss
    return saved, 4 * tokens * v, 4 * 2 * tokens * v  # logits; nll grad + softmax grad


def predict(plan: Plan, *, scope: str = "cpu-tensor") -> Prediction:
    """Predicted device peak of one optimizer step of ``plan``, with every term named.

    ``scope`` "cpu-tensor" (what gate-memory validates) has no allocator slack; the CUDA
    scopes add a stated, unvalidated slack (see ``allocator_slack``).
    """
    d, entry, held = plan.model, method(plan.method), storage(plan.storage)
    rows = plan.micro_batch * (2 if plan.loss in PREFERENCE else 1)  # chosen + rejected
    tokens = rows * plan.seq_len
    streamed = bool(plan.stream_buffers)
    h, f, e = d.hidden_size, d.intermediate_size, _elem(plan)

    embed = 4 * d.vocab_size * h * (1 if d.tie_word_embeddings else 2) + 4 * h
    if streamed:
        weights = embed + cast(int, plan.stream_buffers) * _layer_block_bytes(d, held)
    else:
        per_layer = sum(_stored_bytes(r, c, held) for r, c in _projections(d).values())
        weights = embed + d.num_layers * (per_layer + 4 * sum(_layer_vectors(d)))
        weights += _code_tables(held)
    counts = _trainables(plan)
    trainable = 4 * sum(counts)
    adapter = 0 if entry.trains_base else trainable + _frozen_adapter_bytes(plan)
    if entry.trains_base:
        weights = max(weights, trainable)
    optimizer = _optimizer_bytes(plan, counts)
    grads = trainable

    rope = 2 * e * rows * plan.seq_len * d.head_dim
    head_in = 4 * h + 4 + (4 * h if entry.trains_base else 0)  # final norm (+ head input)
    if (streamed and plan.stream_recompute) or plan.gradient_checkpointing:
        # Only each layer's input is kept; one layer at a time is recomputed in backward.
        kept: float = tokens * (d.num_layers * e * h + head_in) + rope
        last_layer = tokens * (_layer_saved(plan, True) - e * h)
    else:
        kept = (
            tokens
            * (
                _layer_saved(plan, entry.trains_base)
                + (d.num_layers - 1) * _layer_saved(plan, True)
                + head_in
            )
            + rope
        )
        last_layer = 0.0
    if entry.svd_basis:
        # each adapter's U * S product, made in its forward and kept as the weight of the
        # last linear until the backward has used it
        shapes = _projections(d)
        kept += 4 * plan.rank * d.num_layers * sum(shapes[t][0] for t in plan.targets)
    loss_saved, loss_fwd, loss_bwd = _loss_terms(plan, tokens)
    flow = e * tokens * h  # the gradient arriving at the last layer
    tile = _tile_workspace(plan)
    # MLP backward: the down projection's input gradient beside a dequantized tile; then it,
    # grad * up and gate's gradient, then up's gradient in the recomputed silu (_SiluMul; a
    # down adapter's input gradient is accumulated into the first in place).
    down = entry.trains_base or "down_proj" in plan.targets
    layer_ws = max(e * tokens * f + tile, e * tokens * f * (2 if down else 3))
    phases = {
        "loss forward": (kept, loss_saved + loss_fwd, 0.0),
        "loss backward": (kept, loss_saved + loss_bwd, 0.0),
        "last layer backward": (kept + last_layer, 0.0, flow + layer_ws),
        "optimizer step": (0.0, 0.0, 8.0 * max(counts, default=0)),
    }
    phase = max(phases, key=lambda k: sum(phases[k]))
    activations, loss, workspace = (math.ceil(x) for x in phases[phase])
    slack = allocator_slack(activations + loss + workspace, scope)
    terms = {
        "weights": int(weights),
        "adapter": int(adapter),
        "gradients": int(grads),
        "optimizer": int(optimizer),
        "activations": activations,
        "logits_and_loss": loss,
        "workspace": workspace,
        "allocator_slack": slack,
    }
    notes = []
    if plan.optimizer != "adamw":
        notes.append("8-bit optimizer state: bitsandbytes blockwise basis, not measured here")
    if e == 2:
        notes.append("16-bit compute: derived from the code, not validated on CPU")
    return Prediction(sum(terms.values()), terms, phase, scope, tuple(notes))


def allocator_slack(dynamic: int, scope: str) -> int:
    """0 for tensor-level scopes. CUDA reserved: 10% of the step's dynamic bytes, rounded up
    to the caching allocator's 2 MiB segments (a stated basis, to be fitted by the harness)."""
    if scope in ("cpu-tensor", "cuda-allocated"):
        return 0
    return -(-int(0.10 * dynamic) // (2 << 20)) * (2 << 20)


def with_changes(plan: Plan, **changes: Any) -> Plan:
    """``plan`` with some fields replaced (the knobs the fit search turns)."""
    return replace(plan, **changes)
