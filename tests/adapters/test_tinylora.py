"""TinyLoRA: the promised delta W, its fixed basis, sharing, persistence and 13-parameter count."""

from __future__ import annotations

import pytest
import torch

import assay
from assay.adapters import adapter_modules, attach, dense_weight, load_adapter, save_adapter
from assay.adapters.perturb import randomize_adapters
from assay.memory.accounting import owned_bytes


def test_delta_is_u_sigma_mix_v_transpose(fresh):
    model = randomize_adapters(attach(fresh(), "tinylora", u=5, r=3, targets=["o_proj"]), 4)
    adapter = adapter_modules(model)[0][1]
    weight = dense_weight(adapter.base).double()
    s = torch.linalg.svdvals(weight)
    assert torch.allclose(adapter.tiny_S.double(), s[:3], atol=1e-5)
    mix = sum(adapter.tiny_v[i].double() * adapter.tiny_P[i].double() for i in range(5))
    expected = adapter.tiny_U.double() @ torch.diag(adapter.tiny_S.double()) @ mix
    expected = expected @ adapter.tiny_V.double()
    x = torch.randn(4, adapter.in_features)
    with torch.no_grad():
        got = adapter(x) - adapter.base(x)
    assert torch.allclose(got.double(), x.double() @ expected.T, atol=1e-5)
    assert torch.allclose(adapter.delta_weight().double(), expected, atol=1e-6)


def test_projection_entries_have_variance_one_over_r(fresh):
    model = attach(fresh(), "tinylora", u=64, r=4, targets="all-linear")
    entries = torch.cat([a.tiny_P.flatten() for _, a in adapter_modules(model)])
    assert abs(entries.std().item() - 0.5) < 0.02  # std 1/sqrt(4), from 14,336 draws


def test_sharing_global_is_one_vector_per_target_is_many(fresh):
    shared = attach(fresh(), "tinylora", u=13, sharing="global", targets="all-linear")
    vectors = {id(a.tiny_v) for _, a in adapter_modules(shared)}
    assert len(vectors) == 1
    assert sum(p.numel() for p in shared.parameters() if p.requires_grad) == 13
    separate = attach(fresh(), "tinylora", u=13, sharing="per_target", targets="all-linear")
    assert sum(p.numel() for p in separate.parameters() if p.requires_grad) == 13 * 14


@pytest.mark.parametrize("sharing", ["global", "per_target"])
def test_reload_reproduces_outputs_bitwise(fresh, ids, tmp_path, sharing):
    model = attach(fresh(), "tinylora", u=7, r=2, sharing=sharing, targets="all-linear")
    randomize_adapters(model, seed=8)
    save_adapter(model, tmp_path)
    loaded = load_adapter(fresh(), tmp_path)
    first, second = model.state_dict(), loaded.state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    with torch.no_grad():
        assert torch.equal(model(ids), loaded(ids))


@pytest.mark.slow
def test_smollm2_tinylora_u13_global_owns_exactly_13_trainable_parameters(smollm2_path):
    model = attach(assay.load(smollm2_path), "tinylora", u=13, sharing="global")
    assert owned_bytes(model)["trainable_bytes"] == 52
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == 13
