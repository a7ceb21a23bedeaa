"""attach: targets, layer subsets, trainable sets, seeding, refusals, zero-init and disable."""

from __future__ import annotations

import pytest
import torch

from assay.adapters import (
    METHODS,
    AdapterLinear,
    adapter_modules,
    attach,
    disable,
    disabled,
    enable,
)
from assay.adapters.perturb import randomize_adapters
from assay.errors import ConfigError

ADAPTER_METHODS = [m for m in METHODS if m != "full"]


def test_target_groups_and_layer_subset(fresh):
    model = attach(fresh(), "lora", targets="mlp", layers=[1])
    assert [n for n, _ in adapter_modules(model)] == [
        "layers.1.mlp.gate_proj",
        "layers.1.mlp.up_proj",
        "layers.1.mlp.down_proj",
    ]
    model = attach(fresh(), "lora", targets=["v_proj", "q_proj"])
    assert [n for n, _ in adapter_modules(model)] == [
        f"layers.{i}.self_attn.{p}" for i in (0, 1) for p in ("q_proj", "v_proj")
    ]
    assert len(adapter_modules(attach(fresh(), "lora", targets="all-linear"))) == 14


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"method": "lokr"}, "method 'lokr' is unknown"),
        ({"method": "lora", "targets": ["lm_head"]}, "unknown projection"),
        ({"method": "lora", "layers": [5]}, "out of range"),
        ({"method": "lora", "u": 3}, "takes no option"),
        ({"method": "tinylora", "sharing": "layer"}, "sharing"),
        ({"method": "lora", "rank": 0}, "rank must be an integer >= 1"),
    ],
)
def test_bad_arguments_are_one_line_config_errors(fresh, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        attach(fresh(), **kwargs)


def test_attaching_twice_is_refused(fresh):
    model = attach(fresh(), "lora")
    with pytest.raises(ConfigError, match="already has adapters"):
        attach(model, "dora")


def test_full_needs_float32_storage(fresh):
    with pytest.raises(ConfigError, match="needs storage float32"):
        attach(fresh("bf16"), "full")
    model = attach(fresh(), "full")
    assert all(p.requires_grad for p in model.parameters())
    with pytest.raises(ConfigError, match="cannot disable method 'full'"):
        disable(model)


@pytest.mark.parametrize("method", ADAPTER_METHODS)
def test_only_adapter_tensors_train(fresh, method):
    model = attach(fresh(), method, rank=4)
    trainable = {n.rsplit(".", 1)[-1] for n, p in model.named_parameters() if p.requires_grad}
    expected = {
        "lora": {"lora_A", "lora_B"},
        "rslora": {"lora_A", "lora_B"},
        "lora_fa": {"lora_B"},
        "loraplus": {"lora_A", "lora_B"},
        "dora": {"lora_A", "lora_B", "lora_magnitude_vector"},
        "tinylora": {"tiny_v"},
    }[method]
    assert trainable == expected


def test_scaling_rules(fresh):
    lora = adapter_modules(attach(fresh(), "lora", rank=4, alpha=8))[0][1]
    rslora = adapter_modules(attach(fresh(), "rslora", rank=4, alpha=8))[0][1]
    assert (lora.scaling, rslora.scaling) == (2.0, 4.0)


def test_lora_a_is_kaiming_uniform_and_b_is_zero(fresh):
    adapter = adapter_modules(attach(fresh(), "lora", rank=8, targets=["q_proj"]))[0][1]
    bound = 1 / adapter.in_features**0.5  # kaiming-uniform with a = sqrt 5
    assert adapter.lora_A.abs().max() <= bound
    assert adapter.lora_A.abs().max() > 0.9 * bound
    assert not adapter.lora_B.any()


@pytest.mark.parametrize("method", ["lora", "dora", "tinylora"])
def test_same_seed_same_adapter_other_seed_differs(fresh, method):
    def tensors(seed):
        model = attach(fresh(), method, rank=4, seed=seed)
        return [t.clone() for _, a in adapter_modules(model) for t in a.state_dict().values()]

    first, again, other = tensors(3), tensors(3), tensors(4)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))


@pytest.mark.parametrize("method", METHODS)
def test_fresh_adapter_is_an_exact_no_op(fresh, ids, method):
    model = fresh()
    with torch.no_grad():
        base = model(ids)
        attach(model, method, rank=4, targets="all-linear")
        assert torch.equal(model(ids), base)
        if method != "full":
            randomize_adapters(model, seed=1)
            assert not torch.equal(model(ids), base)


@pytest.mark.parametrize("method", ADAPTER_METHODS)
def test_disable_gives_base_logits_exactly(fresh, ids, method):
    model = fresh()
    with torch.no_grad():
        base = model(ids)
        randomize_adapters(attach(model, method, rank=4, targets="all-linear"), seed=2)
        adapted = model(ids)
        with disabled(model):
            assert torch.equal(model(ids), base)
        assert torch.equal(model(ids), adapted)
        disable(model)
        assert torch.equal(model(ids), base)
        enable(model)
        assert torch.equal(model(ids), adapted)


def test_adapters_wrap_nf4_storage_through_the_call_contract(fresh, ids):
    model = fresh("nf4")
    with torch.no_grad():
        base = model(ids)
        randomize_adapters(attach(model, "dora", rank=4, targets="all-linear"), seed=3)
        assert not torch.equal(model(ids), base)
    loss = model(ids).logsumexp(-1).mean()
    loss.backward()
    adapter = adapter_modules(model)[0][1]
    assert isinstance(adapter, AdapterLinear)
    assert adapter.lora_B.grad is not None and adapter.lora_B.grad.abs().sum() > 0
    assert all(p.grad is None for n, p in model.named_parameters() if ".base." in n)
