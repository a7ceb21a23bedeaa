"""FrozenLinear over NF4 and bf16 stores: numerics (at every width: bitsandbytes' native CPU
decoder misreads rows that are not whole 64-element blocks, assay decodes those itself),
gradients, tiles, and no matmul_4bit."""

from __future__ import annotations

import bitsandbytes
import bitsandbytes.functional as bnbf
import pytest
import torch
import torch.nn.functional as F
from bitsandbytes.backends.default.ops import _dequantize_4bit_compute

from assay.storage import DenseWeight, FrozenLinear, NF4Weight, apply_storage

NF4_KINDS = [False, True]


def _bnb_dense(weight: torch.Tensor, double_quant: bool) -> torch.Tensor:
    packed, state = bnbf.quantize_4bit(
        weight, blocksize=64, quant_type="nf4", compress_statistics=double_quant
    )
    return bnbf.dequantize_4bit(packed, state)


def flat_reference(weight: torch.Tensor, double_quant: bool) -> torch.Tensor:
    """bitsandbytes' own pure-torch decode (its path for odd widths) of the same bytes."""
    packed, state = bnbf.quantize_4bit(
        weight, blocksize=64, quant_type="nf4", compress_statistics=double_quant
    )
    absmax = state.absmax
    if double_quant:
        absmax = bnbf.dequantize_blockwise(absmax, state.state2) + state.offset
    flat = packed.reshape(-1).view(torch.uint8)
    return _dequantize_4bit_compute(
        flat, absmax.float(), state.code, 64, weight.shape, weight.dtype
    )


@pytest.mark.parametrize("double_quant", NF4_KINDS)
@pytest.mark.parametrize(
    "shape", [(96, 70), (1536, 576), (200, 64), (8, 32), (4, 48), (8, 80), (64, 160)]
)
def test_nf4_decode_matches_bitsandbytes_by_rows_and_gather(shape, double_quant):
    """Against bitsandbytes' pure-torch decode of the same bytes: its native CPU decoder
    misreads rows that are not whole 64-element blocks (32, 48, 80, 160), assay must not."""
    torch.manual_seed(0)
    weight = torch.randn(*shape)
    store = NF4Weight(weight, double_quant=double_quant)
    expected = flat_reference(weight, double_quant)
    assert torch.equal(store.dequantize(), expected)
    if shape[1] % 64 == 0:
        assert torch.equal(expected, _bnb_dense(weight, double_quant))
    # within half of NF4's widest code gap (0.16 of a block's absmax) of the original
    assert (expected - weight).abs().max() <= 0.17 * weight.abs().max()
    step = 3 * store.row_align
    tiles = [
        store.rows(r, min(r + step, shape[0]), torch.float32) for r in range(0, shape[0], step)
    ]
    assert torch.equal(torch.cat(tiles), expected)
    if shape[1] % 64 == 0:
        index = torch.tensor([[3, 1, 3], [shape[0] - 1, 0, 7]])
        assert torch.equal(store.gather(index, torch.float32), expected[index])


@pytest.mark.parametrize("double_quant", NF4_KINDS)
def test_forward_equals_dense_dequantized_linear_exactly(double_quant):
    torch.manual_seed(1)
    linear = torch.nn.Linear(576, 192)
    frozen = apply_storage(linear, "nf4_double_quant" if double_quant else "nf4")
    dense = _bnb_dense(linear.weight.detach(), double_quant)
    x = torch.randn(2, 5, 576)
    assert torch.equal(frozen(x), F.linear(x, dense, linear.bias))


@pytest.mark.parametrize("storage", ["nf4", "nf4_double_quant", "bf16"])
def test_gradient_reaches_input_never_weight(storage):
    torch.manual_seed(2)
    linear = torch.nn.Linear(128, 96)
    frozen = apply_storage(linear, storage)
    dense = frozen.dequantized_weight()
    x = torch.randn(3, 128, requires_grad=True)
    frozen(x).pow(2).sum().backward()
    grad = x.grad.clone()
    x.grad = None
    F.linear(x, dense, frozen.bias).pow(2).sum().backward()
    assert torch.equal(grad, x.grad)
    assert all(not p.requires_grad for p in frozen.parameters())
    assert all(p.grad is None for p in frozen.parameters())


def test_tiles_bound_the_decoded_workspace(monkeypatch):
    torch.manual_seed(3)
    store = NF4Weight(torch.randn(512, 256), double_quant=True)
    frozen = FrozenLinear(store, None, tile_bytes=64 * 256 * 4)
    largest = []
    original = NF4Weight.rows

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        largest.append(out.numel() * out.element_size())
        return out

    monkeypatch.setattr(NF4Weight, "rows", spy)
    x = torch.randn(4, 256, requires_grad=True)
    y = frozen(x)
    y.sum().backward()
    assert frozen.tile_rows == 64
    assert len(largest) == 2 * 512 // 64
    assert max(largest) <= frozen.dequant_tile_bytes < 512 * 256 * 4
    dense = store.dequantize()
    torch.testing.assert_close(y, x @ dense.T, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(x.grad, torch.ones(4, 512) @ dense, rtol=1e-5, atol=1e-4)


def test_no_path_calls_matmul_4bit(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("bnb.matmul_4bit must not be called")

    monkeypatch.setattr(bitsandbytes, "matmul_4bit", refuse)
    monkeypatch.setattr(bitsandbytes.autograd._functions, "matmul_4bit", refuse)
    layer = apply_storage(torch.nn.Sequential(torch.nn.Linear(64, 64)), "nf4_double_quant")
    x = torch.randn(2, 64, requires_grad=True)
    layer(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_in_place_reuse_of_saved_storage_is_refused():
    layer = apply_storage(torch.nn.Linear(64, 64), "nf4")
    x = torch.randn(2, 64, requires_grad=True)
    y = layer(x).sum()
    layer.store.packed.add_(1)  # what a recycled streaming slot would do
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_bf16_stores_bf16_and_computes_in_input_dtype():
    torch.manual_seed(4)
    linear = torch.nn.Linear(64, 32)
    frozen = apply_storage(linear, "bf16")
    assert isinstance(frozen.store, DenseWeight)
    assert frozen.store.weight.dtype == torch.bfloat16
    x = torch.randn(3, 64)
    expected = F.linear(x, linear.weight.detach().bfloat16().float(), linear.bias)
    assert frozen(x).dtype == torch.float32
    assert torch.equal(frozen(x), expected)
    assert frozen(x.bfloat16()).dtype == torch.bfloat16


def test_frozen_linear_at_a_narrow_width_multiplies_the_right_weights():
    torch.manual_seed(1)
    weight = torch.randn(96, 48)
    frozen = FrozenLinear(NF4Weight(weight, double_quant=True))
    x = torch.randn(5, 48, requires_grad=True)
    y = frozen(x)
    y.sum().backward()
    dense = flat_reference(weight, True)
    assert torch.equal(y, x.detach() @ dense.T)
    assert torch.allclose(x.grad, torch.ones(5, 96) @ dense, rtol=1e-5, atol=1e-5)
