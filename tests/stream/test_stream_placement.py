"""Where a streamed model keeps what: on an accelerator every resident part (embeddings, final
norm, head, adapters) moves to the device while streamed base tensors stay on the host; the
cache folder; what ``describe`` reports. The ``meta`` device stands in for an accelerator, so
placement is checked on CPU-only machines too."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import assay
from assay.adapters import attach
from assay.stream import StreamedModel
from assay.stream.engine import default_cache_dir


def test_resident_parts_move_to_the_device_and_streamed_tensors_stay_on_the_host(tiny_models):
    model = assay.load(tiny_models["llama3"]["hf"], storage="nf4")
    attach(model, "lora", rank=4, alpha=8, targets="all-linear")
    streamed = StreamedModel(model, device="meta")
    for name, child in model.named_children():
        if name != "layers":
            assert all(t.device.type == "meta" for t in child.state_dict().values()), name
    moved = 0
    for layer, layout in zip(model.layers, streamed.layouts, strict=True):
        kept_on_host = {e.name for e in layout.entries}
        for name, tensor in [
            *layer.named_parameters(remove_duplicate=False),
            *layer.named_buffers(remove_duplicate=False),
        ]:
            want = "cpu" if name in kept_on_host else "meta"
            assert tensor.device.type == want, name
            if want == "meta":
                moved += 1
                assert tensor.requires_grad == ("lora_" in name), name
    assert moved == 14 * len(model.layers)  # A and B of seven projections per layer


def test_cpu_streaming_leaves_everything_where_it_was(tiny_models):
    model = assay.load(tiny_models["llama3"]["hf"])
    before = {n: t for n, t in model.named_parameters() if "layers" not in n}
    StreamedModel(model)
    assert all(dict(model.named_parameters())[n] is t for n, t in before.items())


def test_the_cache_folder_follows_assay_cache_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("ASSAY_CACHE", str(tmp_path / "cache"))
    assert default_cache_dir() == tmp_path / "cache" / "stream"
    monkeypatch.delenv("ASSAY_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "assay" / "stream"
    monkeypatch.setenv("ASSAY_CACHE", "")  # empty means unset
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "assay" / "stream"


@pytest.mark.parametrize("recompute", [True, False])
def test_describe_reports_the_store_slots_and_fetches(tiny_models, recompute):
    model = assay.load(tiny_models["qwen2"]["hf"])
    streamed = StreamedModel(model, buffers=3, recompute=recompute)
    streamed(torch.randint(0, 320, (1, 6), generator=torch.Generator().manual_seed(1)))
    largest = max(layout.nbytes for layout in streamed.layouts)
    assert streamed.describe() == {
        "tier": "ram",
        "bytes": sum(layout.nbytes for layout in streamed.layouts),
        "pinned": False,
        "pin_error": None,
        "buffers": 3,
        "recompute": recompute,
        "slot_bytes": largest,
        "device_base_bytes": 3 * largest,
        "largest_layer_bytes": largest,
        "fetches": len(model.layers),
    }


def test_a_disk_store_lives_under_the_cache_folder(tiny_models, monkeypatch, tmp_path):
    monkeypatch.setenv("ASSAY_CACHE", str(tmp_path))
    streamed = StreamedModel(assay.load(tiny_models["llama3"]["hf"]), tier="disk")
    assert Path(streamed.describe()["directory"]).parent == tmp_path / "stream"
