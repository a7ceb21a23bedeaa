"""The MLP's act(gate) * up (SiLU, and Gemma's tanh-approximated GELU) keeps two FFN-wide tensors
for backward, not three, and its output and gradients are bit for bit those of plain autograd."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from assay.model.decoder import GATED_PRODUCTS, MLP, _SiluMul

ACTIVATIONS = {"silu": F.silu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 64, 96), (3, 7, 37)])
def test_output_and_gradients_equal_autograds_bitwise(dtype, shape, activation):
    gen = torch.Generator().manual_seed(0)
    gate, up, grad = (torch.randn(shape, generator=gen).to(dtype) for _ in range(3))
    gate.requires_grad_(True)
    up.requires_grad_(True)
    plain = ACTIVATIONS[activation](gate) * up
    fused = GATED_PRODUCTS[activation].apply(gate, up)
    assert torch.equal(plain, fused)
    for want, got in zip(
        torch.autograd.grad(plain, (gate, up), grad),
        torch.autograd.grad(fused, (gate, up), grad),
        strict=True,
    ):
        assert torch.equal(want, got)


def test_only_one_input_needs_a_gradient():
    gate = torch.randn(4, 8, requires_grad=True)
    up = torch.randn(4, 8)
    (grad_gate,) = torch.autograd.grad(_SiluMul.apply(gate, up).sum(), gate)
    (want,) = torch.autograd.grad((F.silu(gate) * up).sum(), gate)
    assert torch.equal(grad_gate, want)


def saved_bytes(run, exclude: tuple[torch.Tensor, ...] = ()) -> int:
    """Bytes autograd keeps for the backward of ``run()``, ``exclude``'s storages left out."""
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return sum(seen.values())


@pytest.mark.parametrize("fused", [False, True], ids=["apart", "gate_up_proj"])
def test_an_mlp_layer_keeps_two_ffn_wide_tensors(monkeypatch, fused):
    shape = SimpleNamespace(
        hidden_size=32, intermediate_size=96, fused_projections=fused, activation="silu"
    )
    mlp = MLP(shape).requires_grad_(False)
    x = torch.randn(1, 10, 32, requires_grad=True)
    wide = 10 * 96 * 4
    params = tuple(mlp.parameters())
    assert saved_bytes(lambda: mlp(x), params) == 2 * wide
    # control: autograd's own silu(gate) * up keeps silu's output as well
    monkeypatch.setattr(_SiluMul, "apply", lambda g, u: F.silu(g) * u)
    assert saved_bytes(lambda: mlp(x), params) == 3 * wide


@pytest.mark.parametrize(
    ("gate_grad", "up_grad", "kept"),
    [(True, True, 2), (True, False, 2), (False, True, 1), (False, False, 0)],
)
def test_only_what_the_wanted_gradients_need_is_kept(gate_grad, up_grad, kept):
    gate = torch.randn(10, 96, requires_grad=gate_grad)
    up = torch.randn(10, 96, requires_grad=up_grad)
    # up's gradient needs silu(gate), recomputed from gate; gate's needs gate and up
    assert saved_bytes(lambda: _SiluMul.apply(gate, up)) == kept * gate.nbytes
