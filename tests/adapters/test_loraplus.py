"""LoRA+ (method ``loraplus``): LoRA whose B factor trains at ``lr_ratio`` times the rate.

The independent reference is PEFT's ``create_loraplus_optimizer``: over the same adapted model
and the same gradients, assay's optimizer must take bitwise the same step.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from peft.optimizers import create_loraplus_optimizer

from assay.adapters import adapter_modules, attach
from assay.errors import ConfigError
from assay.settings.loader import train_config_from_dict
from assay.train.build import build_optimizer, trainable_parameters

LR, RATIO = 1e-3, 16.0


def _config(tmp_path, **adapter):
    (tmp_path / "train.jsonl").write_text('{"text": "x"}\n')
    return train_config_from_dict(
        {
            "model": "m.gguf",
            "data": {"train": "train.jsonl"},
            "steps": 1,
            "adapter": {"method": "loraplus", **adapter},
            "optim": {"lr": LR, "weight_decay": 0.1},
        },
        tmp_path / "run.yaml",
    )


def _step(model, optimizer, ids):
    optimizer.zero_grad()
    model(ids).float().pow(2).mean().backward()
    optimizer.step()


def test_b_trains_lr_ratio_times_faster_than_a(fresh, tmp_path):
    model = attach(fresh(), "loraplus", rank=4, lr_ratio=RATIO)
    params = trainable_parameters(model)
    optimizer = build_optimizer(_config(tmp_path, lr_ratio=RATIO), params)
    rate = {id(p): group["lr"] for group in optimizer.param_groups for p in group["params"]}
    names = [n for n, _ in adapter_modules(model)]
    assert {n: rate[id(p)] for n, p in params.items()} == {
        **{f"{n}.lora_A": LR for n in names},
        **{f"{n}.lora_B": LR * RATIO for n in names},
    }


def test_a_step_equals_peft_loraplus_optimizer(fresh, ids, tmp_path):
    ours = attach(fresh(), "loraplus", rank=4, lr_ratio=RATIO, seed=3)
    for _, adapter in adapter_modules(ours):  # B = 0 at init would hide A's rate
        torch.nn.init.normal_(adapter.lora_B, generator=torch.Generator().manual_seed(5))
    theirs = copy.deepcopy(ours)
    params = trainable_parameters(ours)
    optimizer = build_optimizer(_config(tmp_path, lr_ratio=RATIO), params)
    reference = create_loraplus_optimizer(
        theirs, torch.optim.AdamW, lr=LR, loraplus_lr_ratio=RATIO, loraplus_weight_decay=0.1
    )
    for _ in range(2):
        _step(ours, optimizer, ids)
        _step(theirs, reference, ids)
    mine, peft = trainable_parameters(ours), trainable_parameters(theirs)
    assert mine.keys() == peft.keys()
    assert all(torch.equal(mine[n], peft[n]) for n in mine)
    # the control: plain LoRA's optimizer (one rate) takes another step
    plain = copy.deepcopy(theirs)
    config = _config(tmp_path, lr_ratio=RATIO)
    lora = dataclasses.replace(config, adapter=dataclasses.replace(config.adapter, method="lora"))
    single = build_optimizer(lora, trainable_parameters(plain))
    _step(plain, single, ids)
    _step(theirs, reference, ids)
    moved = trainable_parameters(plain)
    assert not all(torch.equal(moved[n], peft[n]) for n in moved)


def test_loraplus_saves_as_a_peft_lora(fresh, tmp_path):
    import json

    from assay.adapters import load_adapter, save_adapter

    model = attach(fresh(), "loraplus", rank=4, lr_ratio=RATIO)
    folder = save_adapter(model, tmp_path / "adapter")
    saved = json.loads((folder / "adapter_config.json").read_text())
    assert saved["peft_type"] == "LORA" and not saved["use_rslora"] and not saved["use_dora"]
    loaded = load_adapter(fresh(), folder)
    assert loaded.assay_adapter_spec.method == "loraplus"
    assert all(
        torch.equal(a.lora_B, b.lora_B)
        for (_, a), (_, b) in zip(adapter_modules(model), adapter_modules(loaded), strict=True)
    )


@pytest.mark.parametrize("ratio", [0, -1.0, float("inf"), "fast", True])
def test_a_bad_lr_ratio_is_refused(fresh, ratio):
    with pytest.raises(ConfigError, match="lr_ratio"):
        attach(fresh(), "loraplus", lr_ratio=ratio)
