"""An independent NF4 codec, written from the format in shared/SPEC.md, to verify bitsandbytes.

This module imports neither bitsandbytes nor assay. It exists so that gate-nf4 can show that the
bytes bitsandbytes produces are exactly the bytes the format prescribes. Where bitsandbytes'
arithmetic is more specific than the prose format (how the scale is applied, what a zero block
stores), the rule is written here as a named option and the gate records which rule matched:

- ``scale``: full blocks of 64 are scaled by the fp32 reciprocal ``x * (1 / absmax)``; a trailing
  partial block is divided, ``x / absmax``. The two differ in the last bit for some inputs, which
  moves values that sit exactly on a code midpoint.
- a zero block keeps absmax 0 in full blocks, while a zero trailing block stores absmax 1e-38.
- ``offset`` is ``torch.mean`` over the fp32 absmax (torch's reduction order).
- the nested 8-bit codes are not a plain nearest search: bitsandbytes' CPU kernel snaps each
  normalized value s to a grid of 65,536 points, index ``trunc(((s + 1) * 0.5) * 65535 + 0.5)``,
  and the grid point ``-1 + 2 i / 65535`` takes the nearest code (ties to the lower). A nested block
  whose absmax is 0 gets code 0 throughout. ``nested_rule="nearest"`` gives the plain rule.

Everything else follows SPEC: row-major flattening, nearest NF4 code with ties to the lower code,
first element in the high nibble, nested 8-bit dynamic map over blocks of 256 absmax values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

NF4_CODE = torch.tensor(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    dtype=torch.float32,
)

ZERO_CODE = 7
LUT_POINTS = 65536

# Smallest scale a zero trailing block is given; avoids 0/0 in its division.
TINY_ABSMAX = 1e-38


def signed_dynamic_map() -> torch.Tensor:
    """The 256-entry signed dynamic 8-bit map, computed in fp32, sorted ascending.

    Seven decades 10^-6 .. 10^0; decade i holds the midpoints of 2^i + 1 evenly spaced points on
    [0.1, 1], with both signs; plus 0 and 1.
    """
    parts = []
    for i in range(7):
        points = torch.linspace(0.1, 1.0, 2**i + 1, dtype=torch.float32)
        mids = (points[:-1] + points[1:]) / 2
        scale = 10.0 ** (i - 6)
        parts += [mids * scale, mids * -scale]
    parts.append(torch.tensor([0.0, 1.0], dtype=torch.float32))
    return torch.sort(torch.cat(parts)).values


@dataclass
class Encoded:
    """The parts of an NF4 encoding, all on CPU.

    ``absmax`` is fp32 per block without double quant; with it, ``absmax`` holds the uint8 codes
    into the dynamic map, ``absmax2`` the fp32 per-256 scales and ``offset`` the subtracted mean,
    and ``block_absmax`` keeps the fp32 per-block absmax before nesting.
    """

    packed: torch.Tensor
    absmax: torch.Tensor
    absmax2: torch.Tensor | None = None
    offset: torch.Tensor | None = None
    numel: int = 0
    block_absmax: torch.Tensor | None = None


def _nearest_index(values: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
    """Index of the nearest entry of the sorted ``code``; a value on a midpoint takes the lower."""
    mids = (code[:-1] + code[1:]) / 2
    index = np.searchsorted(mids.numpy(), values.numpy(), side="left")
    return torch.from_numpy(index.astype(np.int64))


def _block_scales(flat: torch.Tensor, blocksize: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block absmax and the values scaled into [-1, 1] by the rule in the module docstring."""
    n = flat.numel()
    full = n - n % blocksize
    body = flat[:full].reshape(-1, blocksize)
    absmax = body.abs().amax(dim=1) if full else torch.empty(0)
    inverse = 1.0 / absmax.clamp(min=TINY_ABSMAX)
    scaled = [(body * inverse[:, None]).clamp(-1, 1).reshape(-1)]
    if full < n:
        tail_max = flat[full:].abs().amax().clamp(min=TINY_ABSMAX)
        absmax = torch.cat([absmax, tail_max[None]])
        scaled.append((flat[full:] / tail_max).clamp(-1, 1))
    return absmax, torch.cat(scaled)


def _pack(codes: torch.Tensor, high_first: bool) -> torch.Tensor:
    """Two 4-bit codes per byte; with ``high_first`` the earlier element is the high nibble.

    An odd count is padded with the code of 0.0 (index 7), as a zero scaled value would be.
    """
    if codes.numel() % 2:
        codes = torch.cat([codes, torch.full((1,), ZERO_CODE, dtype=codes.dtype)])
    pairs = codes.to(torch.uint8).reshape(-1, 2)
    first, second = (pairs[:, 0], pairs[:, 1]) if high_first else (pairs[:, 1], pairs[:, 0])
    return (first << 4) | second


def _grid_lut(code: torch.Tensor) -> np.ndarray:
    """For each of the 65,536 grid points on [-1, 1], the index of its nearest code."""
    c = code.numpy()
    mids = (np.float32(0.5) * (c[:-1] + c[1:])).astype(np.float32)
    i = np.arange(LUT_POINTS).astype(np.float32)
    grid = (np.float32(-1.0) + (np.float32(2.0) * i) / np.float32(LUT_POINTS - 1)).astype(
        np.float32
    )
    return np.searchsorted(mids, grid, side="left").astype(np.uint8)


def _grid_index(normed: np.ndarray) -> np.ndarray:
    """Grid point of each normalized value, with fp32 rounding at each step."""
    f32 = np.float32
    s = np.clip(normed.astype(f32), f32(-1.0), f32(1.0))
    t = ((s + f32(1.0)) * f32(0.5)).astype(f32)
    t = ((t * f32(LUT_POINTS - 1)).astype(f32) + f32(0.5)).astype(f32)
    return np.trunc(t).astype(np.int64)


def quantize_blockwise_8bit(
    values: torch.Tensor, blocksize: int = 256, *, rule: str = "lut65536"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Blockwise 8-bit codes into the signed dynamic map and the fp32 absmax of each block.

    ``rule`` is "lut65536" (bitsandbytes' CPU kernel) or "nearest" (nearest code, ties lower).
    """
    dyn = signed_dynamic_map()
    flat = values.detach().to("cpu", torch.float32).reshape(-1).numpy()
    lut = _grid_lut(dyn)
    codes = np.zeros(flat.size, dtype=np.uint8)
    absmax = np.zeros((flat.size + blocksize - 1) // blocksize, dtype=np.float32)
    for b, start in enumerate(range(0, flat.size, blocksize)):
        block = flat[start : start + blocksize]
        absmax[b] = np.abs(block).max()
        if absmax[b] == 0:
            continue
        normed = (block * (np.float32(1.0) / absmax[b])).astype(np.float32)
        if rule == "lut65536":
            codes[start : start + blocksize] = lut[_grid_index(normed)]
        else:
            clipped = torch.from_numpy(np.clip(normed, -1, 1))
            codes[start : start + blocksize] = _nearest_index(clipped, dyn).numpy()
    return torch.from_numpy(codes), torch.from_numpy(absmax)


def encode(
    weight: torch.Tensor,
    *,
    double_quant: bool,
    blocksize: int = 64,
    nested_blocksize: int = 256,
    high_first: bool = True,
    nested_rule: str = "lut65536",
) -> Encoded:
    """Encode ``weight`` (any shape, any float dtype) the way SPEC prescribes.

    ``high_first=False`` builds the deliberately wrong nibble order used as the gate's control.
    """
    flat = weight.detach().to("cpu", torch.float32).reshape(-1).contiguous()
    absmax, scaled = _block_scales(flat, blocksize)
    packed = _pack(_nearest_index(scaled, NF4_CODE), high_first).reshape(-1, 1)
    if not double_quant:
        return Encoded(packed=packed, absmax=absmax, numel=flat.numel())
    offset = absmax.mean()
    codes, absmax2 = quantize_blockwise_8bit(absmax - offset, nested_blocksize, rule=nested_rule)
    return Encoded(packed, codes, absmax2, offset, flat.numel(), block_absmax=absmax)


def decode_absmax(enc: Encoded, *, nested_blocksize: int = 256, use_offset: bool = True):
    """The fp32 per-block absmax; with double quant ``dyn[q] * absmax2[b // 256] + offset``.

    ``use_offset=False`` is the deliberately broken decoder used as a control.
    """
    if enc.absmax2 is None:
        return enc.absmax
    dyn = signed_dynamic_map()
    scale = enc.absmax2.repeat_interleave(nested_blocksize)[: enc.absmax.numel()]
    absmax = dyn[enc.absmax.long()] * scale
    return absmax + enc.offset if use_offset else absmax


def decode(
    enc: Encoded,
    shape: tuple[int, ...],
    *,
    blocksize: int = 64,
    use_offset: bool = True,
) -> torch.Tensor:
    """fp32 weights ``code[q] * absmax_b`` of ``shape`` from an encoding."""
    packed = enc.packed.reshape(-1)
    codes = torch.stack([packed >> 4, packed & 0xF], dim=1).reshape(-1)[: enc.numel]
    absmax = decode_absmax(enc, use_offset=use_offset)
    scale = absmax.repeat_interleave(blocksize)[: enc.numel]
    return (NF4_CODE[codes.long()] * scale).reshape(shape)


def half_spacing(values: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
    """Half the gap between the two entries of sorted ``code`` that bracket each value.

    A value rounded to its nearest code is off by at most this (in the code's units).
    """
    upper = torch.searchsorted(code, values.contiguous()).clamp(1, code.numel() - 1)
    return (code[upper] - code[upper - 1]) / 2


def adversarial_inputs() -> list[tuple[str, torch.Tensor]]:
    """Named tensors that probe the edges of the format: ties, zeros, outliers, odd sizes."""
    gen = torch.Generator().manual_seed(0)
    mids = (NF4_CODE[:-1] + NF4_CODE[1:]) / 2
    block = torch.cat([torch.ones(1), mids, -mids, mids[:15] * 0.5, torch.zeros(2)])[:64]
    outlier = torch.randn(64 * 40, generator=gen) * 1e-3
    outlier[::64] = 50.0
    return [
        ("midpoints", block.repeat(96)),
        ("midpoints_scaled", block.repeat(96) * 3.7),
        ("zeros", torch.zeros(64 * 300)),
        ("zeros_odd", torch.zeros(101)),
        ("outlier_per_block", outlier),
        ("odd_shape_7x13", torch.randn(7, 13, generator=gen)),
        ("width_70", torch.randn(96, 70, generator=gen)),
        ("tiny_1e-30", torch.randn(3000, generator=gen) * 1e-30),
        ("huge_1e30", torch.randn(3000, generator=gen) * 1e30),
        (
            "mixed_scales",
            torch.randn(300, 64, generator=gen) * torch.logspace(-30, 30, 300)[:, None],
        ),
    ]
