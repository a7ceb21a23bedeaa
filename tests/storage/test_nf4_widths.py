"""NF4 rows that are not whole 64-element blocks decode right: bitsandbytes' native CPU decoder
(0.50, AVX512) misreads their scales, so assay decodes those widths itself."""

from __future__ import annotations

import bitsandbytes.functional as bnbf
import pytest
import torch
from bitsandbytes.backends.default.ops import _dequantize_4bit_compute

from assay.storage import FrozenLinear, NF4Weight


def _flat_reference(weight: torch.Tensor, double_quant: bool) -> torch.Tensor:
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


@pytest.mark.parametrize("double_quant", [False, True])
@pytest.mark.parametrize("shape", [(8, 32), (4, 48), (8, 80), (64, 160), (96, 70), (8, 192)])
def test_every_width_decodes_its_flat_blocks(shape, double_quant):
    torch.manual_seed(0)
    weight = torch.randn(*shape)
    store = NF4Weight(weight, double_quant=double_quant)
    expected = _flat_reference(weight, double_quant)
    assert torch.equal(store.dequantize(), expected)
    step = 2 * store.row_align
    tiles = [
        store.rows(r, min(r + step, shape[0]), torch.float32) for r in range(0, shape[0], step)
    ]
    assert torch.equal(torch.cat(tiles), expected)
    # within half of NF4's widest code gap (0.16 of a block's absmax) of the original
    assert (store.dequantize() - weight).abs().max() <= 0.17 * weight.abs().max()


def test_frozen_linear_at_a_narrow_width_multiplies_the_right_weights():
    torch.manual_seed(1)
    weight = torch.randn(96, 48)
    frozen = FrozenLinear(NF4Weight(weight, double_quant=True))
    x = torch.randn(5, 48, requires_grad=True)
    y = frozen(x)
    y.sum().backward()
    dense = _flat_reference(weight, True)
    assert torch.equal(y, x.detach() @ dense.T)
    assert torch.allclose(x.grad, torch.ones(5, 96) @ dense, rtol=1e-5, atol=1e-5)
