"""The FLOP model against a hand count on a tiny config, and SmolLM2's matmul parameter count."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from assay.model.flops import matmul_parameters, step_flops
from assay_testing.tiny import smollm2_config

# hidden 4, FFN 6, 2 layers, 2 heads of 2, 1 KV head, vocab 10.
TINY = SimpleNamespace(
    hidden_size=4,
    intermediate_size=6,
    num_layers=2,
    num_heads=2,
    num_kv_heads=1,
    head_dim=2,
    vocab_size=10,
)


def test_matmul_parameters_by_hand():
    # q 4x4 + k 4x2 + v 4x2 + o 4x4 + gate/up/down 3 x 4x6 = 120 per layer; head 10x4
    assert matmul_parameters(TINY) == 2 * 120 + 40


def test_frozen_base_with_lora_by_hand():
    flops = step_flops(TINY, batch=1, seq=3, lora_rank=1, lora_targets="attention")
    assert flops.tokens == 3
    assert flops.forward == 2 * 280 * 3
    assert flops.backward_input == 2 * 280 * 3
    assert flops.backward_weight == 0
    # r (in + out) per target: q 8, k 6, v 6, o 8 -> 28 per layer; forward 2 tokens 28 layers
    assert flops.adapter == 3 * (2 * 3 * 28 * 2)
    # 2 matmuls x 2 FLOPs x seq^2 x head_dim x heads x layers / 2 (causal)
    assert flops.attention == 3 * (2 * 9 * 2 * 2 * 2)
    assert flops.model == 1680 + 1680 + 1008 + 432
    assert flops.recompute == 0 and flops.executed == flops.model


def test_trained_base_recompute_and_batch():
    full = step_flops(TINY, batch=2, seq=3, base_trains=True)
    assert full.backward_weight == 2 * 280 * 6
    assert full.adapter == 0
    assert full.attention == 3 * 2 * (2 * 9 * 2 * 2 * 2)  # per sequence, not per token squared
    again = step_flops(TINY, batch=1, seq=3, lora_rank=1, recompute=True)
    # one more forward of the layers (not the head), adapters and attention
    assert again.recompute == 2 * 240 * 3 + 2 * 3 * 28 * 2 + 2 * 9 * 2 * 2 * 2
    assert again.model == step_flops(TINY, batch=1, seq=3, lora_rank=1).model
    assert again.executed == again.model + again.recompute


def test_explicit_targets_equal_the_group():
    group = step_flops(TINY, batch=1, seq=4, lora_rank=2, lora_targets="all-linear")
    names = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert step_flops(TINY, batch=1, seq=4, lora_rank=2, lora_targets=names) == group
    assert group.to_dict()["model"] == group.model


@pytest.mark.parametrize("tied", [True, False])
def test_smollm2_matmul_parameters(tied):
    config = smollm2_config(tie_word_embeddings=tied)
    # SmolLM2's 134,515,008 parameters minus its 61 norms of 576: the tied head multiplies
    assert matmul_parameters(config) == 134_515_008 - 61 * 576
    flops = step_flops(config, batch=1, seq=256, lora_rank=8)
    assert 4 * matmul_parameters(config) * 256 < flops.model < 1.1 * 4 * 134_515_008 * 256
