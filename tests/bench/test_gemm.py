"""GEMM bookkeeping: calls read from profiler events, their FLOPs, the replay, and the FLOP
model against the GEMMs autograd really runs on a tiny LoRA decoder (nothing is timed)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from assay.adapters import attach
from assay.model import Decoder
from assay.model.flops import projection_shapes, step_flops
from assay_bench.gemm import call_flops, gemm_calls, gemm_rate, replay_seconds
from assay_bench.profile import profile_step
from assay_bench.step import next_token_loss
from assay_testing.tiny import llama_config


@dataclass
class Event:
    name: str
    input_shapes: list = field(default_factory=list)


def test_gemm_calls_group_by_op_and_shape():
    events = [
        Event("aten::mm", [[4, 8], [8, 16]]),
        Event("aten::mm", [[4, 8], [8, 16]]),
        Event("aten::addmm", [[16], [4, 8], [8, 16], [], []]),  # alpha, beta dropped
        Event("aten::bmm", [[2, 4, 8], [2, 8, 3]]),
        Event("aten::linear", [[4, 8], [16, 8]]),  # composite: its mm child is the kernel
        Event("aten::add", [[4], [4]]),
    ]
    calls = {(c["op"], str(c["shapes"])): c["count"] for c in gemm_calls(events)}
    assert calls == {
        ("aten::mm", "[[4, 8], [8, 16]]"): 2,
        ("aten::addmm", "[[16], [4, 8], [8, 16]]"): 1,
        ("aten::bmm", "[[2, 4, 8], [2, 8, 3]]"): 1,
    }
    assert call_flops("aten::mm", [[4, 8], [8, 16]]) == 2 * 4 * 8 * 16
    assert call_flops("aten::addmm", [[16], [4, 8], [8, 16]]) == 2 * 4 * 8 * 16
    assert call_flops("aten::bmm", [[2, 4, 8], [2, 8, 3]]) == 2 * 2 * 4 * 8 * 3


def test_replay_and_rate_run():
    calls = [
        {"op": "aten::mm", "shapes": [[8, 16], [16, 4]], "count": 3},
        {"op": "aten::addmm", "shapes": [[4], [8, 16], [16, 4]], "count": 2},
        {"op": "aten::bmm", "shapes": [[2, 8, 16], [2, 16, 4]], "count": 1},
    ]
    assert replay_seconds(calls, repeats=1) > 0
    assert gemm_rate(32, 32, 32, repeats=1) > 0


def test_flop_model_counts_the_gemms_autograd_runs():
    config = llama_config(num_layers=3)
    torch.manual_seed(0)
    model = attach(Decoder(config).requires_grad_(False), "lora", rank=2, targets="attention")
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    prof = profile_step(lambda: next_token_loss(model(ids), ids).backward())
    flops = step_flops(config, batch=2, seq=12, lora_rank=2, lora_targets="attention")
    # The embedding is frozen, so autograd never forms layer 0's q/k/v input gradients
    # (base and adapter); the model counts them, as documented.
    shapes = projection_shapes(config)
    skipped = sum(
        2 * 24 * (i * o + 2 * i) for i, o in (shapes[p] for p in ("q_proj", "k_proj", "v_proj"))
    )
    assert prof["gemm_flops"] == flops.model - flops.attention - skipped
    assert flops.attention > 0 and not any("bmm" in c["op"] for c in prof["gemm_calls"])


@pytest.mark.parametrize("op", ["aten::mm", "aten::addmm"])
def test_call_flops_ignores_bias(op):
    shapes = [[4, 8], [8, 2]] if op == "aten::mm" else [[2], [4, 8], [8, 2]]
    assert call_flops(op, shapes) == 2 * 4 * 8 * 2
