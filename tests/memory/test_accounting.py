"""owned_bytes: counted from real tensors, shared storage once, adapters by convention."""

from __future__ import annotations

import torch
from torch import nn

from assay.memory import owned_bytes, packed_parameter_count
from assay.storage import apply_storage, quantize_embeddings


class _FakeLoRA(nn.Module):
    """The adapter convention: assay_adapter marks the subtree, assay_base exempts the base."""

    assay_adapter = True
    assay_base = ("base",)

    def __init__(self, base: nn.Module, rank: int = 4) -> None:
        super().__init__()
        self.base = base
        self.lora_a = nn.Parameter(torch.zeros(rank, 64), requires_grad=False)
        self.lora_b = nn.Parameter(torch.zeros(64, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + x @ self.lora_a.T @ self.lora_b.T


def test_dense_model_bytes_and_tied_weights_once():
    emb = nn.Embedding(100, 64)
    head = nn.Linear(64, 100, bias=False)
    head.weight = emb.weight
    counts = owned_bytes(nn.ModuleDict({"emb": emb, "head": head, "norm": nn.LayerNorm(64)}))
    assert counts["floating_base_bytes"] == (100 * 64 + 64 + 64) * 4
    assert counts["weight_bytes"] == counts["floating_base_bytes"]
    assert counts["packed_base_bytes"] == 0 and counts["adapter_bytes"] == 0


def test_nf4_double_quant_bytes_come_from_the_tensors():
    model = nn.Sequential(nn.Linear(256, 128, bias=False), nn.Linear(128, 256, bias=False))
    apply_storage(model, "nf4_double_quant")
    counts = owned_bytes(model)
    params = 2 * 256 * 128
    blocks = params // 64
    # packed nibbles + uint8 block codes + one fp32 per 256 blocks + an fp32 offset per weight,
    # plus the 256-entry nested map and 16-entry NF4 map held once for both weights.
    expected = params // 2 + blocks + (blocks // 256) * 4 + 2 * 4 + 256 * 4 + 16 * 4
    assert counts["packed_base_bytes"] == expected
    assert counts["floating_base_bytes"] == 0
    assert packed_parameter_count(model) == params
    assert counts["dequant_tile_bytes"] >= 256 * 128 * 4


def test_tied_nf4_head_is_counted_once():
    model = nn.Module()
    model.embed_tokens = nn.Embedding(128, 64)
    model.lm_head = nn.Linear(64, 128, bias=False)
    model.lm_head.weight = model.embed_tokens.weight
    quantize_embeddings(model, "nf4")
    counts = owned_bytes(model)
    assert counts["packed_base_bytes"] == 128 * 64 // 2 + (128 * 64 // 64) * 4 + 16 * 4
    assert packed_parameter_count(model) == 128 * 64


def test_adapters_trainable_grads_and_optimizer_state():
    model = nn.Sequential(_FakeLoRA(nn.Linear(64, 64)))
    model[0].base.requires_grad_(False)
    optimizer = torch.optim.AdamW([model[0].lora_b], lr=1e-3)
    model(torch.randn(2, 64)).sum().backward()
    optimizer.step()
    counts = owned_bytes(model, optimizer)
    assert counts["floating_base_bytes"] == (64 * 64 + 64) * 4
    assert counts["adapter_bytes"] == (4 * 64 + 64 * 4) * 4
    assert counts["frozen_adapter_bytes"] == 4 * 64 * 4
    assert counts["trainable_bytes"] == 64 * 4 * 4
    assert counts["grad_bytes"] == 64 * 4 * 4
    # exp_avg and exp_avg_sq like the parameter, plus AdamW's scalar fp32 step.
    assert counts["optimizer_bytes"] == 2 * 64 * 4 * 4 + 4


def test_meta_tensors_own_nothing():
    with torch.device("meta"):
        model = nn.Linear(1024, 1024)
    assert owned_bytes(model)["weight_bytes"] == 0
