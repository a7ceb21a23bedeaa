"""Our decoder's logits against transformers, on tiny families and on the real SmolLM2."""

from __future__ import annotations

import pytest
import torch

import assay
from assay.errors import ConfigError
from assay_testing.tiny import FAMILIES, writes_gguf

FORMATS = [(f, fmt) for f in FAMILIES for fmt in ("hf", "gguf") if fmt == "hf" or writes_gguf(f)]


def _reference_logits(hf_dir, ids: torch.Tensor, mask: torch.Tensor | None = None):
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        return ref(input_ids=ids, attention_mask=mask).logits


@pytest.mark.parametrize(("family", "fmt"), FORMATS)
def test_tiny_family_logits_match_transformers(tiny_models, family, fmt):
    torch.manual_seed(1)
    ids = torch.randint(0, 320, (2, 96))
    expected = _reference_logits(tiny_models[family]["hf"], ids)
    model = assay.load(tiny_models[family][fmt])
    with torch.no_grad():
        got = model(ids)
    assert got.shape == expected.shape
    assert (got - expected).abs().max().item() <= 1e-4


def test_padding_mask_matches_transformers(tiny_models):
    ids = torch.randint(0, 320, (2, 24))
    mask = torch.ones_like(ids)
    mask[1, 16:] = 0
    expected = _reference_logits(tiny_models["qwen2"]["hf"], ids, mask)
    model = assay.load(tiny_models["qwen2"]["hf"])
    with torch.no_grad():
        got = model(ids, attention_mask=mask)
    real = mask.bool()
    assert (got[real] - expected[real]).abs().max().item() <= 1e-4


def test_a_family_without_gguf_is_not_exported_as_gguf(tiny_models, tmp_path):
    """OLMo 2's GGUF is neither read nor written: its export is refused before a byte is
    written, naming the format that works."""
    from assay.adapters.export import export_merged

    model = assay.load(tiny_models["olmo2"]["hf"])
    with pytest.raises(ConfigError, match=r"assay writes no GGUF of olmo2.*safetensors"):
        export_merged(model, tmp_path / "out", format="gguf")
    assert not any(tmp_path.iterdir())


def test_gguf_and_safetensors_give_the_same_canonical_fingerprint(tiny_models):
    for family in filter(writes_gguf, FAMILIES):
        a = assay.load(tiny_models[family]["hf"]).fingerprint
        b = assay.load(tiny_models[family]["gguf"]).fingerprint
        assert a.canonical_sha256 == b.canonical_sha256
        assert a.parameter_count == b.parameter_count
        assert a.source_sha256 != b.source_sha256


def test_unpermuted_qk_would_be_caught(tiny_models):
    """The parity check fails when the llama Q/K permutation is not undone."""
    from assay.model import gguf as gguf_module

    ids = torch.randint(0, 320, (1, 32))
    expected = _reference_logits(tiny_models["llama3"]["hf"], ids)
    model = assay.load(tiny_models["llama3"]["gguf"])
    original = gguf_module.permute_qk
    try:
        gguf_module.permute_qk = lambda w, heads, inverse: w
        broken = assay.load(tiny_models["llama3"]["gguf"])
    finally:
        gguf_module.permute_qk = original
    with torch.no_grad():
        assert (model(ids) - expected).abs().max() <= 1e-4
        assert (broken(ids) - expected).abs().max() > 1e-2


@pytest.mark.slow
def test_smollm2_logits_match_transformers(smollm2_path):
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(
        smollm2_path.parent, gguf_file=smollm2_path.name, dtype=torch.float32
    ).eval()
    model = assay.load(smollm2_path)
    ids = torch.tensor([[1, 504, 3458, 282, 4649, 314, 253, 1345, 28, 2102, 30, 9, 77, 1001]])
    with torch.no_grad():
        got, expected = model(ids), ref(ids).logits
    assert got.numel() >= 49_152
    assert (got - expected).abs().max().item() <= 1e-4


@pytest.mark.slow
def test_smollm2_fingerprint_counts(smollm2_path):
    model = assay.load(smollm2_path)
    fp = model.fingerprint
    assert fp.parameter_count == 134_515_008
    assert fp.decoded_fp32_bytes == 538_060_032
    assert model.config.tie_word_embeddings
    assert (model.config.num_layers, model.config.hidden_size) == (30, 576)
