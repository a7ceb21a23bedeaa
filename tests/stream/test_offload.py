"""Loading straight into the disk tier: bitwise the store and run that a resident-built disk
store gives, a load whose tensor peak does not grow with depth, and reads that never map."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import assay
from assay.adapters import attach
from assay.adapters.attachment import layerwise_attach
from assay.adapters.perturb import randomize_adapters
from assay.errors import ConfigError
from assay.stream import StreamedModel
from assay.stream.layout import base_tensors
from assay.stream.offload import load_into_disk_tier
from assay_testing.tiny import save_tiny

CASES = [
    ("lora", "float32", {}),
    ("dora", "nf4", {}),
    ("tinylora", "nf4_double_quant", {"sharing": "global"}),
    ("lora_fa", "bf16", {}),
]


def _grads(model: torch.nn.Module, base: torch.nn.Module, ids: torch.Tensor):
    logits = model(ids)
    logits.float().square().mean().backward()
    return logits.detach(), {n: p.grad for n, p in base.named_parameters() if p.requires_grad}


@pytest.mark.parametrize(("method", "storage", "options"), CASES)
def test_loaded_into_disk_equals_resident_built_disk_store(
    tiny_models, tmp_path, method, storage, options
):
    path = tiny_models["llama3"]["hf"]
    ids = torch.randint(0, 320, (1, 24), generator=torch.Generator().manual_seed(0))
    base = assay.load(path, storage=storage)
    attach(base, method, seed=3, targets="all-linear", **options)
    reference = StreamedModel(
        randomize_adapters(base, seed=1), tier="disk", cache_dir=tmp_path / "built"
    )
    adapt = layerwise_attach(len(base.layers), method, seed=3, targets="all-linear", **options)
    streamed, store, _ = load_into_disk_tier(
        path, storage=storage, adapt=adapt, cache_dir=tmp_path / "loaded"
    )
    adapt.finish(streamed)
    assert streamed.assay_adapter_spec == base.assay_adapter_spec
    assert all(t.is_meta for layer in streamed.layers for t in base_tensors(layer).values())
    run = StreamedModel(randomize_adapters(streamed, seed=1), tier="disk", store=store)
    assert store.directory.name == reference.store.directory.name  # the same content key
    logits, grads = _grads(reference, base, ids)
    s_logits, s_grads = _grads(run, streamed, ids)
    assert torch.equal(logits, s_logits)
    assert grads.keys() == s_grads.keys() and grads
    assert all(torch.equal(grads[n], s_grads[n]) for n in grads)


def test_second_load_publishes_the_same_store_and_leaves_no_staging(tiny_models, tmp_path):
    path = tiny_models["llama3"]["hf"]
    first = load_into_disk_tier(path, cache_dir=tmp_path)[1]
    second = load_into_disk_tier(path, cache_dir=tmp_path)[1]
    assert (first.reused, second.reused) == (False, False)  # fresh bytes always published
    assert first.directory == second.directory
    assert [p.name for p in tmp_path.iterdir()] == [first.directory.name]


def test_a_failed_load_leaves_no_staging_folder(tiny_models, tmp_path):
    def broken(index: int, layer: torch.nn.Module) -> None:
        if index == 1:
            raise ConfigError("adapter refused layer 1")

    with pytest.raises(ConfigError, match="layer 1"):
        load_into_disk_tier(tiny_models["llama3"]["hf"], adapt=broken, cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_layerwise_attach_refuses_full_and_out_of_order_layers():
    with pytest.raises(ConfigError, match="trains the base"):
        layerwise_attach(2, "full")
    adapt = layerwise_attach(2, "lora")
    with pytest.raises(ConfigError, match="in order"):
        adapt(1, torch.nn.Module())


def test_the_load_holds_one_layer_at_a_time(tmp_path):
    """The rule: when layer i is being adapted, every earlier layer's base is already on disk
    (meta placeholders), whatever the depth, so the load's peak is one layer."""
    folder = save_tiny("llama3", tmp_path / "L6", seed=0, gguf=False, num_hidden_layers=6)["hf"]
    seen: list[torch.nn.Module] = []
    dense_at_each_layer: list[int] = []

    def watch(index: int, layer: torch.nn.Module) -> None:
        dense_at_each_layer.append(
            sum(not t.is_meta for earlier in seen for t in base_tensors(earlier).values())
        )
        assert all(not t.is_meta for t in base_tensors(layer).values())
        seen.append(layer)

    load_into_disk_tier(folder, adapt=watch, cache_dir=tmp_path / "c")
    assert dense_at_each_layer == [0] * 6
    assert all(t.is_meta for layer in seen for t in base_tensors(layer).values())
    # the control: a resident load keeps every earlier layer dense
    resident = assay.load(folder)
    assert sum(not t.is_meta for layer in resident.layers for t in base_tensors(layer).values())


def test_disk_reads_never_map_a_shard(tiny_models, tmp_path):
    """Reads go through the page cache into the slot: no shard is mapped into the process, so
    layers read do not stay in its resident set."""
    model = StreamedModel(assay.load(tiny_models["llama3"]["hf"]), tier="disk", cache_dir=tmp_path)
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]))
    maps = Path("/proc/self/maps")
    if not maps.exists():
        pytest.skip("no /proc/self/maps on this platform")
    assert model.pool.fetches >= len(model.layers)
    assert str(model.store.directory) not in maps.read_text()
