"""A streamed forward fetches each layer exactly once: the layer it prefetches is the next one."""

from __future__ import annotations

import pytest
import torch

import assay
from assay.adapters import attach
from assay.stream import StreamedModel


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "keep-activations"])
def test_forward_fetches_every_layer_once(tiny_models, recompute):
    model = assay.load(tiny_models["mistral"]["hf"], storage="nf4")
    attach(model, "lora", rank=4, alpha=8, targets="all-linear")
    streamed = StreamedModel(model, buffers=2, recompute=recompute)
    ids = torch.randint(0, 320, (1, 8), generator=torch.Generator().manual_seed(0))
    before = streamed.pool.fetches
    streamed(ids)  # grad enabled: keep-activations mode takes its own forward path
    assert streamed.pool.fetches - before == len(model.layers)
