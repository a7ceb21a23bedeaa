"""apply_storage / quantize_embeddings: what they replace, what they keep, what they refuse."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from assay.errors import ConfigError
from assay.storage import (
    STORAGES,
    FrozenEmbedding,
    FrozenLinear,
    apply_storage,
    quantize_embeddings,
    register_storage_hook,
)


class _TinyLM(nn.Module):
    def __init__(self, tied: bool = True) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(32, 64)
        self.layers = nn.ModuleList([nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64))])
        self.lm_head = nn.Linear(64, 32, bias=False)
        if tied:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.layers[0](self.embed_tokens(ids)))


def test_unknown_storage_names_the_valid_ones():
    with pytest.raises(ConfigError, match=r"unknown storage 'nf3'.*float32, bf16, nf4"):
        apply_storage(nn.Linear(4, 4), "nf3")
    with pytest.raises(ConfigError, match="expected one of"):
        quantize_embeddings(_TinyLM(), "int8")


def test_float32_storage_is_a_no_op():
    layer = nn.Sequential(nn.Linear(8, 8))
    before = layer[0]
    assert apply_storage(layer, "float32") is layer and layer[0] is before


@pytest.mark.parametrize("storage", [s for s in STORAGES if s != "float32"])
def test_every_linear_is_replaced_and_bias_kept(storage):
    layer = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Sequential(nn.Linear(128, 64)))
    bias = layer[0].bias.detach().clone()
    apply_storage(layer, storage)
    assert isinstance(layer[0], FrozenLinear) and isinstance(layer[2][0], FrozenLinear)
    assert torch.equal(layer[0].bias, bias) and not layer[0].bias.requires_grad
    assert not any(isinstance(m, nn.Linear) for m in layer.modules())


def test_tied_head_shares_the_embedding_store():
    torch.manual_seed(0)
    model = _TinyLM()
    dense = model.embed_tokens.weight.detach().clone()
    quantize_embeddings(model, "nf4_double_quant")
    assert isinstance(model.embed_tokens, FrozenEmbedding)
    assert model.lm_head.store is model.embed_tokens.store
    ids = torch.tensor([[1, 5, 5, 31]])
    rows = model.embed_tokens(ids)
    decoded = model.embed_tokens.store.dequantize()
    assert torch.equal(rows, decoded[ids])
    assert (rows - dense[ids]).abs().max() < dense.abs().max() * 0.2
    hidden = torch.randn(1, 4, 64)
    assert torch.equal(model.lm_head(hidden), hidden @ decoded.T)


def test_untied_head_gets_its_own_store():
    model = _TinyLM(tied=False)
    quantize_embeddings(model, "nf4")
    assert model.lm_head.store is not model.embed_tokens.store


def test_hooks_see_every_conversion_in_order():
    seen = []
    handle = register_storage_hook(lambda phase, module, storage: seen.append((phase, storage)))
    try:
        apply_storage(nn.Linear(64, 64), "nf4")
        quantize_embeddings(_TinyLM(), "bf16")
    finally:
        handle.remove()
    apply_storage(nn.Linear(64, 64), "nf4")
    assert seen == [("before", "nf4"), ("after", "nf4"), ("before", "bf16"), ("after", "bf16")]


def test_adapter_linears_are_left_alone():
    class FakeAdapter(nn.Module):
        assay_adapter = True

        def __init__(self) -> None:
            super().__init__()
            self.lora_a = nn.Linear(64, 4, bias=False)

    block = nn.ModuleDict({"proj": nn.Linear(64, 64), "adapter": FakeAdapter()})
    apply_storage(block, "nf4")
    assert isinstance(block["proj"], FrozenLinear)
    assert isinstance(block["adapter"].lora_a, nn.Linear)
