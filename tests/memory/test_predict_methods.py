"""The predictor models every registered adapter method on its own terms: TinyLoRA is not a
rank-1 LoRA, LoRA-FA's frozen A is stored but keeps no input, DoRA keeps the outputs its
magnitude rescales, and the cohort accepts them all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.memory.predict import Plan, predict, shape
from assay.settings.methods import NAMES

TINY = shape(
    vocab_size=2048,
    hidden_size=128,
    intermediate_size=384,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=32,
)
ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SCHEMA = Path(__file__).parents[2] / "src" / "assay" / "schemas" / "cohort.schema.json"


def test_the_cohort_schema_accepts_every_registered_method():
    rows = json.loads(SCHEMA.read_text())["properties"]["rows"]["items"]["properties"]
    assert set(rows["method"]["enum"]) == set(NAMES)


def test_tinylora_trains_u_scalars_and_stores_its_basis():
    shared = Plan(model=TINY, method="tinylora", rank=4, tiny_u=13, targets=ALL)
    own = Plan(
        model=TINY, method="tinylora", rank=4, tiny_u=13, targets=ALL, tiny_sharing="per_target"
    )
    lora1 = Plan(model=TINY, method="lora", rank=1, targets=ALL)
    a, b = predict(shared).terms, predict(own).terms
    assert a["gradients"] == 4 * 13  # one shared vector
    assert b["gradients"] == 4 * 13 * len(ALL) * TINY.num_layers
    # U, S, V^T and P are stored per target whatever the sharing: far more than a rank-1 LoRA
    assert a["adapter"] - a["gradients"] > predict(lora1).terms["adapter"]


@pytest.mark.parametrize(
    "plan",
    [
        Plan(
            model=TINY,
            method="tinylora",
            rank=4,
            tiny_u=16,
            tiny_sharing="per_target",
            targets=ALL,
            seq_len=256,
        ),
        Plan(model=TINY, method="lora_fa", rank=8, targets=ALL, seq_len=256),
        Plan(model=TINY, method="dora", rank=8, targets=ALL, seq_len=256),
    ],
    ids=["tinylora", "lora_fa", "dora"],
)
def test_prediction_meets_the_measured_peak(plan):
    pytest.importorskip("torch")
    from assay.memory.measure import measure_in_subprocess

    measured = measure_in_subprocess(plan.to_dict())["device_peak_bytes"]
    assert abs(predict(plan).total / measured - 1) < 0.02


def test_estimate_models_tinylora_with_its_own_options():
    from types import SimpleNamespace

    from assay.memory.plan import plan_from_config

    adapter = SimpleNamespace(
        method="tinylora", rank=None, targets=ALL, u=7, r=3, sharing="per_target"
    )
    config = SimpleNamespace(
        adapter=adapter,
        storage="float32",
        stream=None,
        gradient_checkpointing=False,
        data=SimpleNamespace(seq_len=128),
        batch=SimpleNamespace(micro_batch=1, grad_accum=1),
        loss=SimpleNamespace(type="ce", chunk_size=None),
    )
    plan = plan_from_config(config, TINY)
    assert (plan.method, plan.rank, plan.tiny_u, plan.tiny_sharing) == (
        "tinylora",
        3,
        7,
        "per_target",
    )
