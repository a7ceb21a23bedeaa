"""FLOPs of one training step of a Llama-family decoder: the yardstick for GFLOP/s figures.

Pure Python (no torch), so it runs wherever the config can be read. A multiply-add counts as
two FLOPs. The model, for ``tokens = batch x seq`` and ``P`` = matmul parameters (every
projection of every layer plus the LM head; the embedding lookup is free, a tied head still
multiplies):

- forward: ``2 P tokens``;
- backward, frozen base: ``2 P tokens`` (input gradients only; no weight gradients);
- backward, trained base (``base_trains=True``): another ``2 P tokens`` for weight gradients;
- LoRA rank ``r`` on a projection ``in -> out``: forward ``2 tokens r (in + out)``, backward
  twice that (gradients of A, B, the low-rank activation and the input);
- causal attention: forward ``2 x 2 batch seq^2 head_dim heads layers / 2`` (QK^T and AV,
  halved by the causal mask), backward twice the forward;
- recomputation (gradient checkpointing, streamed layers recomputed in backward) repeats the
  layers' forward. It is counted in ``executed``, never in ``model``: achieved GFLOP/s and
  the fraction of the GEMM ceiling use the model FLOPs, so redundant work never looks useful.

Approximations: norms, RoPE, softmax, SiLU, residual adds, the loss and the optimizer are not
counted (O(tokens x hidden) or O(parameters), under 1% here); a frozen base's first layer
skips some input gradients that autograd never needs (the embedding is frozen), which the
model still counts (under 1% for 30 layers); NF4 dequantization is not a FLOP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

SUMMARY = (
    "one step = forward 2·P·tokens + backward 2·P·tokens (input gradients; a frozen base has "
    "no weight gradients, a trained one adds 2·P·tokens), P = matmul parameters of every "
    "projection plus the LM head (embedding lookup free); LoRA adds 2·tokens·r·(in+out) per "
    "target forward and twice that backward; causal attention adds 2·batch·seq²·head_dim·"
    "heads·layers forward and twice that backward; recomputation is never counted; norms, "
    "RoPE, softmax, SiLU, loss and optimizer are not counted (under 1%)"
)
ATTENTION_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_TARGETS = ("gate_proj", "up_proj", "down_proj")
TARGET_GROUPS = {
    "attention": ATTENTION_TARGETS,
    "mlp": MLP_TARGETS,
    "all-linear": ATTENTION_TARGETS + MLP_TARGETS,
}


def projection_shapes(config: Any) -> dict[str, tuple[int, int]]:
    """(in, out) of every projection of one layer, from a ModelConfig-like object."""
    h, f = config.hidden_size, config.intermediate_size
    q = config.num_heads * config.head_dim
    kv = config.num_kv_heads * config.head_dim
    return {
        "q_proj": (h, q),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (q, h),
        "gate_proj": (h, f),
        "up_proj": (h, f),
        "down_proj": (f, h),
    }


def _adapter_shapes(config: Any) -> dict[str, tuple[int, int]]:
    """(in, out) of every projection an adapter may wrap, Phi-3's fused two included."""
    shapes = projection_shapes(config)
    h, q = shapes["q_proj"]
    (_, kv), (_, f) = shapes["k_proj"], shapes["gate_proj"]
    return {**shapes, "qkv_proj": (h, q + 2 * kv), "gate_up_proj": (h, 2 * f)}


def matmul_parameters(config: Any) -> int:
    """P: weights that take part in a matmul (every layer's projections plus the LM head)."""
    per_layer = sum(i * o for i, o in projection_shapes(config).values())
    return per_layer * config.num_layers + config.vocab_size * config.hidden_size


def _targets(targets: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(targets, str):
        return TARGET_GROUPS.get(targets, (targets,))
    return tuple(targets)


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one step by part; ``model`` is the useful total, ``executed`` adds recompute."""

    matmul_parameters: int
    tokens: int
    forward: int
    backward_input: int
    backward_weight: int
    adapter: int
    attention: int
    recompute: int

    @property
    def model(self) -> int:
        return (
            self.forward
            + self.backward_input
            + self.backward_weight
            + self.adapter
            + self.attention
        )

    @property
    def executed(self) -> int:
        return self.model + self.recompute

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "model": self.model, "executed": self.executed}


def step_flops(
    config: Any,
    *,
    batch: int,
    seq: int,
    base_trains: bool = False,
    lora_rank: int | None = None,
    lora_targets: str | Sequence[str] = "attention",
    recompute: bool = False,
) -> StepFlops:
    """FLOPs of one forward + backward over ``batch x seq`` tokens (see the module docstring).

    ``lora_rank`` None means no adapter; ``recompute`` adds one more forward of every layer
    (gradient checkpointing, or streaming that recomputes layers in backward).
    """
    tokens = batch * seq
    p = matmul_parameters(config)
    layers = config.num_layers
    adapter_forward = 0
    if lora_rank is not None:
        adapted = _adapter_shapes(config)
        per_layer = sum(lora_rank * sum(adapted[t]) for t in _targets(lora_targets))
        adapter_forward = 2 * tokens * per_layer * layers
    attention_forward = 2 * batch * seq * seq * config.head_dim * config.num_heads * layers
    recompute_flops = 0
    if recompute:
        layer_params = p - config.vocab_size * config.hidden_size
        recompute_flops = 2 * layer_params * tokens + adapter_forward + attention_forward
    return StepFlops(
        matmul_parameters=p,
        tokens=tokens,
        forward=2 * p * tokens,
        backward_input=2 * p * tokens,
        backward_weight=2 * p * tokens if base_trains else 0,
        adapter=3 * adapter_forward,
        attention=3 * attention_forward,
        recompute=recompute_flops,
    )
