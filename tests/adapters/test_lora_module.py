"""One LoRA module on its own: PEFT's initialisation law, its refusals, mixed dtypes (a bf16 base
with an fp32 adapter returns bf16 and adds the fp32 update), and the repr."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from assay.adapters.dora import DoRALinear
from assay.adapters.lora import LoRALinear
from assay.errors import ConfigError


def _base(dtype=torch.float32, bias=False) -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(256, 48, bias=bias).to(dtype).requires_grad_(False)


def test_a_is_kaiming_uniform_with_peft_bound_and_b_is_zero():
    module = LoRALinear(_base(), rank=64, generator=torch.Generator().manual_seed(1))
    bound = 1 / math.sqrt(256)  # kaiming_uniform(a=sqrt 5): gain sqrt(1/3), so 1/sqrt(fan_in)
    a = module.lora_A.detach()
    assert float(a.abs().max()) <= bound and float(a.abs().max()) > 0.99 * bound
    assert abs(float(a.std()) - bound / math.sqrt(3)) < 0.02 * bound
    assert bool((module.lora_B == 0).all())


def test_not_a_lora_method_and_bad_ranks_are_refused_by_name():
    with pytest.raises(ConfigError, match=r"method 'tinylora' is not a LoRA method; expected"):
        LoRALinear(_base(), method="tinylora")
    for rank in (0, -1, 2.0):
        with pytest.raises(ConfigError, match=rf"rank must be a positive integer, got {rank!r}"):
            LoRALinear(_base(), rank=rank)
    assert LoRALinear(_base(), rank=1).lora_A.shape == (1, 256)


@pytest.mark.parametrize("kind", [LoRALinear, DoRALinear])
def test_a_bf16_base_with_an_fp32_adapter_adds_the_fp32_update(kind):
    module = kind(_base(torch.bfloat16, bias=True), rank=4, alpha=8)
    with torch.no_grad():
        module.lora_B.normal_(generator=torch.Generator().manual_seed(2))
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    out = module(x)
    assert out.dtype == torch.bfloat16 and module.lora_A.dtype == torch.float32
    weight = module.base.weight.float() + module.delta_weight()
    want = x.float() @ weight.t() + module.base.bias.float()
    assert float((out.float() - want).abs().max() / want.abs().max()) < 2e-2


def test_the_repr_names_method_rank_scale_and_dropout():
    text = repr(LoRALinear(_base(), method="rslora", rank=4, alpha=8, dropout=0.1))
    assert "method=rslora, rank=4, alpha=8, s=4, dropout=0.1" in text
    assert "dropout" not in LoRALinear(_base(), rank=4, alpha=8).extra_repr()


@pytest.mark.parametrize("kind", [LoRALinear, DoRALinear])
def test_a_bf16_base_stays_bf16_with_dropout_while_training(kind):
    module = kind(_base(torch.bfloat16, bias=True), rank=4, alpha=8, dropout=0.5).train()
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    assert module(x).dtype == torch.bfloat16
