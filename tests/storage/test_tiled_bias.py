"""A tiled FrozenLinear adds each tile's own slice of the bias, keeps the batch shape and
computes in the input's dtype, forward and backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from assay.storage import FrozenLinear, NF4Weight


def test_tiled_forward_adds_each_tiles_own_bias_rows():
    torch.manual_seed(4)
    weight, bias = torch.randn(256, 128), torch.randn(256)
    store = NF4Weight(weight, double_quant=False)
    frozen = FrozenLinear(store, bias, tile_bytes=64 * 128 * 4)
    assert frozen.tile_rows == 64  # four tiles, so a tile that reuses rows 0..63 of the bias shows
    x = torch.randn(3, 128)
    # Tiles may round apart from one GEMM; a misplaced bias slice is off by O(1).
    torch.testing.assert_close(
        frozen(x), F.linear(x, store.dequantize(), bias), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tiled_nf4_keeps_the_batch_shape_and_the_compute_dtype(dtype):
    torch.manual_seed(12)
    store = NF4Weight(torch.randn(256, 128), double_quant=True)
    frozen = FrozenLinear(store, None, tile_bytes=64 * 128 * 4)
    assert frozen.tile_rows < 256  # the tiled paths, forward and backward
    x = torch.randn(2, 3, 128, dtype=dtype, requires_grad=True)
    y = frozen(x)
    y.float().pow(2).sum().backward()
    dense = store.dequantize(torch.float32)
    assert y.shape == (2, 3, 256) and y.dtype == dtype and x.grad.dtype == dtype
    reference = F.linear(x.detach().float(), dense)
    # tiles sum in their own order, and bf16 accumulates in bf16: compare by relative norm
    bound = 2e-2 if dtype == torch.bfloat16 else 1e-5
    assert (y.float() - reference).norm() <= bound * reference.norm()
    expected_grad = (2 * y.detach().float()) @ dense
    assert (x.grad.float() - expected_grad).norm() <= bound * expected_grad.norm()
