"""A tiled FrozenLinear adds each tile's own slice of the bias."""

from __future__ import annotations

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
