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


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "keep-activations"])
def test_the_next_layer_is_on_its_way_while_a_layer_computes(tmp_path, recompute):
    """Forward prefetches layer i + 1 and backward layer i - 1 before layer i runs: without
    that overlap the copy waits on compute and streaming is slower, with the same numbers."""
    from assay_testing.tiny import save_tiny

    # six layers through two slots: every fetch is a real one, in forward and in backward
    path = save_tiny("mistral", tmp_path, seed=3, gguf=False, num_hidden_layers=6)["hf"]
    model = assay.load(path)
    attach(model, "lora", rank=4, alpha=8, targets="all-linear")
    streamed = StreamedModel(model, buffers=2, recompute=recompute)
    seen: list[tuple[int, bool, bool]] = []
    run_layer = streamed.run_layer

    def watching(index, base, x, context):
        ahead = streamed.pool._holder(index + 1) is not None
        behind = streamed.pool._holder(index - 1) is not None
        seen.append((index, ahead, behind))
        return run_layer(index, base, x, context)

    streamed.run_layer = watching
    layers = len(model.layers)
    ids = torch.randint(0, 320, (1, 8), generator=torch.Generator().manual_seed(1))
    streamed(ids).sum().backward()
    forward, backward = seen[:layers], seen[layers:]
    assert [i for i, _, _ in forward] == list(range(layers))
    assert all(ahead for i, ahead, _ in forward if i + 1 < layers)
    if recompute:
        assert [i for i, _, _ in backward] == list(reversed(range(layers)))
        assert all(behind for i, _, behind in backward if i > 0)


def test_position_ids_reach_the_streamed_layers(tiny_models):
    model = assay.load(tiny_models["llama3"]["hf"])
    ids = torch.randint(0, 320, (1, 6), generator=torch.Generator().manual_seed(2))
    shifted = torch.arange(5, 11)[None]
    with torch.no_grad():
        want = model(ids, position_ids=shifted)
        streamed = StreamedModel(model)
        got = streamed(ids, position_ids=shifted)
        plain = streamed(ids)
    assert torch.equal(got, want)
    assert not torch.equal(got, plain)  # the shift matters: rope sees other positions
