"""Defects in assay.storage: NF4 decoding, tiled frozen linears, bf16 storage."""

from __future__ import annotations

from assay_testing.defects import Defect
from assay_testing.patching import Edit

DEFECTS: tuple[Defect, ...] = (
    Defect(
        "storage.apply.bf16_kept_fp32",
        "bf16 storage keeps the fp32 weight (no bf16 rounding, twice the bytes)",
        (
            Edit(
                "assay.storage.apply:make_store",
                'getattr(torch, value) if key == "dtype"',
                'torch.float32 if key == "dtype"',
            ),
        ),
    ),
    Defect(
        "storage.linear.tile_bias_offset",
        "each tile adds the first rows of the bias instead of its own slice",
        (
            Edit(
                "assay.storage.linear:_TiledMatmul.forward",
                "bias[start:stop]",
                "bias[: stop - start]",
            ),
        ),
    ),
    Defect(
        "storage.linear.backward_skips_last_tile",
        "tiled backward stops one tile early: the last rows give no input gradient",
        (
            Edit(
                "assay.storage.linear:_TiledMatmul.backward",
                "for start in range(0, rows, tile):",
                "for start in range(0, rows - tile, tile):",
            ),
        ),
    ),
    Defect(
        "storage.nf4.nibble_order",
        "packed NF4 bytes decoded with the two 4-bit codes swapped",
        (
            Edit(
                "assay.storage.nf4:NF4Weight._decode",
                "    state = bnbf.QuantState(\n",
                "    packed = (packed << 4) | (packed >> 4)\n    state = bnbf.QuantState(\n",
            ),
        ),
    ),
    Defect(
        "storage.nf4.nested_offset_dropped",
        "double-quant block scales decoded without adding the nested offset",
        (
            Edit("assay.storage.nf4:NF4Weight._scales", "    scales = scales + offset\n", ""),
            Edit(
                "assay.storage.nf4:NF4Weight.gather",
                "        decoded = decoded + self.offset\n",
                "",
            ),
        ),
    ),
    Defect(
        "storage.nf4.dequant_dtype",
        "tiles dequantized in bf16 and cast, instead of decoded in the requested dtype",
        (Edit("assay.storage.nf4:NF4Weight._decode", "dtype=dtype,", "dtype=torch.bfloat16,"),),
    ),
    Defect(
        "storage.nf4.gather_order",
        "row lookup returns the rows in sorted index order, not in the order asked",
        (
            Edit(
                "assay.storage.nf4:NF4Weight.gather",
                "    return dense[inverse]",
                "    inverse = inverse.sort().values\n    return dense[inverse]",
            ),
        ),
    ),
)
