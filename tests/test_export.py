"""Merged export (HF safetensors, GGUF F32/F16) and the adapter export, on tiny families."""

from __future__ import annotations

import os

import gguf
import pytest
import torch

import assay
from assay.adapters import attach
from assay.adapters.export import export, export_merged
from assay.adapters.perturb import randomize_adapters
from assay.errors import ConfigError

F32_TOLERANCE = 1e-4  # merged W + delta W is one fp32 rounding away from W x + delta(x)


@pytest.fixture(scope="module")
def ids() -> torch.Tensor:
    return torch.randint(0, 320, (2, 20), generator=torch.Generator().manual_seed(3))


def adapted(path, method: str, storage: str = "float32"):
    model = attach(assay.load(path, storage=storage), method, rank=4, targets="all-linear")
    return randomize_adapters(model, seed=2)


@pytest.mark.parametrize("family", ["qwen2", "mistral", "llama3"])
@pytest.mark.parametrize("method", ["lora", "dora", "tinylora"])
def test_merged_safetensors_loads_in_transformers_and_assay(
    tiny_models, ids, tmp_path, family, method
):
    from transformers import AutoModelForCausalLM

    model = adapted(tiny_models[family]["hf"], method)
    with torch.no_grad():
        expected = model(ids)
        out = export_merged(model, tmp_path / "merged")
        assert torch.equal(model(ids), expected)  # export never mutates the model
        hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
        assert (hf(input_ids=ids).logits - expected).abs().max() <= F32_TOLERANCE
        assert (assay.load(out)(ids) - expected).abs().max() <= F32_TOLERANCE


@pytest.mark.parametrize("family", ["qwen2", "llama3"])
def test_merged_gguf_f32_and_f16(tiny_models, ids, tmp_path, family):
    model = adapted(tiny_models[family]["hf"], "lora")
    with torch.no_grad():
        expected = model(ids)
        f32 = export_merged(model, tmp_path / "m.gguf", format="gguf")
        assert (assay.load(f32)(ids) - expected).abs().max() <= F32_TOLERANCE
        f16 = export_merged(model, tmp_path / "m16.gguf", format="gguf", gguf_type="F16")
        # Like with like: the F32 export with every matrix rounded to fp16.
        rounded = assay.load(f32)
        for param in rounded.parameters():
            if param.dim() == 2:
                param.copy_(param.half().float())
        assert (assay.load(f16)(ids) - rounded(ids)).abs().max() <= F32_TOLERANCE
    reader = gguf.GGUFReader(f16)
    assert len(reader.tensors) == len(model.config.expected_shapes()) + (family == "llama3")


def test_nf4_base_exports_dequantized_plus_delta(tiny_models, ids, tmp_path):
    model = adapted(tiny_models["qwen2"]["hf"], "dora", storage="nf4")
    with torch.no_grad():
        expected = model(ids)
        out = export_merged(model, tmp_path / "merged")
        assert (assay.load(out)(ids) - expected).abs().max() <= F32_TOLERANCE


def test_full_fine_tune_exports_its_weights(tiny_models, ids, tmp_path):
    model = attach(assay.load(tiny_models["mistral"]["hf"]), "full")
    with torch.no_grad():
        model.layers[0].mlp.up_proj.weight.add_(0.01)
        expected = model(ids)
        out = export(model, tmp_path / "full", "safetensors")
        assert torch.equal(assay.load(out)(ids), expected)  # no merge: the same fp32 weights


def test_export_dispatches_and_refuses_unknown_formats(tiny_models, tmp_path):
    model = adapted(tiny_models["qwen2"]["hf"], "rslora")
    assert (export(model, tmp_path / "peft", "peft") / "adapter_config.json").is_file()
    with pytest.raises(ConfigError, match="expected one of peft, safetensors, gguf"):
        export(model, tmp_path / "x", "onnx")
    with pytest.raises(ConfigError, match="use F32 or F16"):
        export_merged(model, tmp_path / "x.gguf", format="gguf", gguf_type="Q4_0")


def test_gguf_rope_divisors_survive_a_gguf_export_and_refuse_safetensors(tiny_models, tmp_path):
    model = adapted(tiny_models["llama3"]["gguf"], "lora")
    with pytest.raises(ConfigError, match="rope"):
        export_merged(model, tmp_path / "m")
    out = export_merged(model, tmp_path / "m.gguf", format="gguf")
    reloaded = assay.load(out)
    assert reloaded.config.rope_freq_divisors == model.config.rope_freq_divisors
    ids = torch.randint(0, 320, (1, 80), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (reloaded(ids) - model(ids)).abs().max() <= 1e-4


@pytest.mark.parametrize("format", ["peft", "safetensors", "gguf"])
def test_every_exported_file_gets_the_mode_a_plain_open_gives(tiny_models, tmp_path, format):
    """Issue 54: the adapter files were 0600 beside a 0644 manifest. The reference is a file
    written by open() under the same umask."""
    before = os.umask(0o022)
    try:
        model = adapted(tiny_models["qwen2"]["hf"], "lora")
        out = export(model, tmp_path / "out", format)
        reference = tmp_path / "plain"
        reference.write_bytes(b"x")
    finally:
        os.umask(before)
    written = [out] if out.is_file() else [out, *out.iterdir()]
    want = reference.stat().st_mode & 0o777
    modes = {p.name: p.stat().st_mode & 0o777 for p in written if p.is_file()}
    assert set(modes.values()) == {want}, modes
    if out.is_dir():
        assert out.stat().st_mode & 0o777 == 0o755
