"""The profile categoriser and the Amdahl bound, on synthetic events (nothing is timed)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from assay_bench.profile import (
    CATEGORIES,
    amdahl_bound,
    categorise,
    category_of,
    summary,
    top_ops,
)


@dataclass
class Event:
    name: str
    self_cpu_time_total: float  # microseconds, like torch's FunctionEvent
    cpu_parent: Event | None = None


@dataclass
class Averaged:
    key: str
    self_cpu_time_total: float
    count: int = 1


@pytest.mark.parametrize(
    ("name", "category"),
    [
        ("aten::mm", "matmul"),
        ("aten::addmm", "matmul"),
        ("aten::bmm", "matmul"),
        ("aten::linear", "matmul"),
        ("MmBackward0", "matmul"),
        ("aten::scaled_dot_product_attention", "attention"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention"),
        ("ScaledDotProductFlashAttentionForCpuBackward0", "attention"),
        ("aten::_log_softmax", "cross_entropy"),
        ("aten::_log_softmax_backward_data", "cross_entropy"),
        ("aten::nll_loss_nd", "cross_entropy"),
        ("NllLossBackward0", "cross_entropy"),
        ("bitsandbytes::dequantize_4bit", "nf4_dequant"),
        ("bitsandbytes::dequantize_blockwise", "nf4_dequant"),
        ("Optimizer.step#AdamW.step", "optimizer"),
        ("Optimizer.zero_grad#AdamW.zero_grad", "optimizer"),
        ("aten::_fused_adamw_", "optimizer"),
        ("aten::empty", None),
        ("aten::mul", None),
        ("aten::repeat_interleave", None),
    ],
)
def test_category_of_names(name, category):
    assert category_of(name) == category


def test_children_inherit_the_nearest_named_ancestor():
    dequant = Event("bitsandbytes::dequantize_4bit", 300.0)
    inner = Event("aten::empty", 50.0, dequant)  # inside the dequant: nf4_dequant
    deeper = Event("aten::copy_", 25.0, inner)  # two levels down: still nf4_dequant
    backward = Event("autograd::engine::evaluate_function: MmBackward0", 10.0)
    mm = Event("aten::mm", 400.0, backward)  # its own name wins: matmul
    transpose = Event("aten::t", 5.0, backward)  # inherits matmul
    loose = Event("aten::add", 100.0)  # no category, no parent: other
    events = [dequant, inner, deeper, backward, mm, transpose, loose]
    seconds = categorise(events, wall_s=0.002)
    assert seconds["nf4_dequant"] == pytest.approx(375e-6)
    assert seconds["matmul"] == pytest.approx(415e-6)
    assert seconds["attention"] == seconds["optimizer"] == seconds["cross_entropy"] == 0
    # other = wall - categorised: the uncategorised add plus time between events
    assert seconds["other"] == pytest.approx(0.002 - 375e-6 - 415e-6)
    assert tuple(seconds) == CATEGORIES


def test_key_averages_rows_go_by_name_alone():
    rows = [
        Averaged("aten::mm", 7e5),
        Averaged("aten::empty", 1e5),
        Averaged("aten::_log_softmax", 2e5),
    ]
    seconds = categorise(rows, wall_s=1.0)
    assert seconds["matmul"] == pytest.approx(0.7)
    assert seconds["cross_entropy"] == pytest.approx(0.2)
    assert seconds["other"] == pytest.approx(0.1)


def test_other_never_negative_and_summary_fractions():
    seconds = categorise([Averaged("aten::mm", 2e6)], wall_s=1.5)
    assert seconds["other"] == 0.0
    out = summary(seconds, 1.5)
    assert out["step_s"] == 1.5
    assert out["categories"]["matmul"]["fraction"] == pytest.approx(2 / 1.5)


def test_amdahl_bound():
    assert amdahl_bound(1.0, 0.75) == pytest.approx(4 / 3)
    with pytest.raises(ValueError):
        amdahl_bound(1.0, 0.0)


def test_top_ops_are_the_costliest_in_order_with_their_share():
    rows = [Averaged(f"op{i}", 1e4 * i, count=i) for i in range(1, 21)]
    top = top_ops(rows, wall_s=2.0, count=15)
    assert [op["name"] for op in top] == [f"op{i}" for i in range(20, 5, -1)]
    expected = {"name": "op20", "s": pytest.approx(0.2), "fraction": pytest.approx(0.1)}
    assert top[0] == {**expected, "calls": 20}
    assert top_ops(rows[:3], wall_s=0.0)[0]["fraction"] == 0.0
