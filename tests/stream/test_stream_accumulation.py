"""A streamed run trains like the resident run of the same numerics, bitwise, when a step
accumulates several micro-batches and when the layers run under bf16 autocast: the cases one
micro-batch per step in float32 cannot show."""

from __future__ import annotations

import pytest
import torch
import yaml
from safetensors.torch import load_file

from assay.settings.loader import load_train_config
from assay.train.loop import Trainer
from assay_testing.text_run import save_text_run


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("accumulation")
    return root, save_text_run(root, seed=4)


def _train(workspace, name: str, **changes) -> tuple[list[float], dict[str, torch.Tensor]]:
    root, base = workspace
    config = {
        **base,
        "adapter": {"method": "lora", "rank": 2, "alpha": 4},
        "optim": {"lr": 1e-2},
        "batch": {"micro_batch": 2, "grad_accum": 2},
        "steps": 3,
        "seed": 2,
        "output": {"dir": str(root / name)},
        **changes,
    }
    (root / f"{name}.yaml").write_text(yaml.safe_dump(config))
    summary = Trainer(load_train_config(root / f"{name}.yaml"), progress=False).train()
    latest = (root / name / "latest").read_text().strip()
    return summary["losses"], load_file(str(root / name / latest / "trainables.safetensors"))


def _assert_same(a, b) -> None:
    assert a[0] == b[0]
    assert a[1].keys() == b[1].keys()
    assert [k for k in a[1] if not torch.equal(a[1][k], b[1][k])] == []


def test_streamed_steps_over_two_micro_batches_equal_resident(workspace):
    resident = _train(workspace, "resident")
    for tier in ("ram", "disk"):
        streamed = _train(workspace, f"streamed-{tier}", stream={"tier": tier, "buffers": 2})
        _assert_same(streamed, resident)


@pytest.mark.parametrize("storage", ["float32", "nf4"])
def test_streamed_bf16_steps_equal_resident_bf16(workspace, storage):
    """The NF4 case once failed: the recomputed layer's backward ran under autocast, so the
    NF4 linear's own backward took bf16 where resident autograd runs it in float32."""
    common = {"precision": "bf16", "storage": storage, "batch": {"micro_batch": 2}}
    resident = _train(workspace, f"bf16-{storage}", **common)
    for recompute in (True, False):
        stream = {"tier": "ram", "buffers": 2, "recompute": recompute}
        streamed = _train(workspace, f"bf16-{storage}-{recompute}", **common, stream=stream)
        _assert_same(streamed, resident)
