"""NF4 weight storage: bitsandbytes' packed 4-bit codes, dequantized a few rows at a time.

bitsandbytes is the codec (``quantize_4bit`` / ``dequantize_4bit`` / ``dequantize_blockwise``);
this module only decides which slice of the packed bytes and block scales to hand it, so that a
caller never needs the whole dense matrix at once.
"""

from __future__ import annotations

import ctypes
import logging
import math

# At import bitsandbytes warns that an optional CPU kernel for matmul_4bit (which assay never
# calls) is absent; that stray line would break the CLI's one-line output.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)

import bitsandbytes.functional as bnbf  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from assay.errors import ConfigError  # noqa: E402

BLOCKSIZE = 64
NESTED_BLOCKSIZE = 256


def _nested_code(code: torch.Tensor) -> torch.Tensor:
    """One shared copy per device of a code table, so 210 layers hold the 1 KiB map once."""
    key = (code.device, code.numel())
    cached = _SHARED_CODES.get(key)
    if cached is not None and torch.equal(cached, code):
        return cached
    _SHARED_CODES[key] = code
    return code


_SHARED_CODES: dict[tuple[torch.device, int], torch.Tensor] = {}

# ``bitsandbytes.functional.dequantize_4bit`` takes ``out=``, but its CPU backend registers no
# kernel for that variant, so every CPU decode allocates. That CPU kernel is one call into the
# native library, ``cdequantize_blockwise_cpu_nf4_<dtype>(packed, absmax, out, blocksize,
# rows, cols)``; calling the same symbol with our own ``out`` gives the same bytes without the
# fresh allocation (whose page faults cost more than the decode).
_NATIVE_DECODERS = {
    torch.float32: "cdequantize_blockwise_cpu_nf4_fp32",
    torch.bfloat16: "cdequantize_blockwise_cpu_nf4_bf16",
    torch.float16: "cdequantize_blockwise_cpu_nf4_fp16",
}


def _native_kernel(dtype: torch.dtype):
    """The native CPU decode for ``dtype``, or None when bitsandbytes would not call it."""
    try:
        from bitsandbytes.cextension import ErrorHandlerMockBNBNativeLibrary, lib
    except ImportError:
        return None
    name = _NATIVE_DECODERS.get(dtype)
    if name is None or isinstance(lib, ErrorHandlerMockBNBNativeLibrary):
        return None
    # the wrapper hands out a raising stub for a missing symbol; ask the loaded library itself
    return getattr(getattr(lib, "_lib", None), name, None)


def decode_into(
    packed: torch.Tensor, absmax: torch.Tensor, blocksize: int, out: torch.Tensor
) -> bool:
    """Write the NF4 decode of ``packed`` (uint8, two codes per byte, row-major over ``out``)
    with fp32 block scales ``absmax`` into ``out``; True if done.

    Guarantees: when True, ``out`` holds exactly the bytes ``dequantize_4bit`` returns for the
    same operands on this CPU (the same native kernel on the same inputs); when False, ``out``
    is untouched and nothing was called.
    """
    kernel = _native_kernel(out.dtype)
    if kernel is None or out.device.type != "cpu" or out.dim() != 2 or not out.is_contiguous():
        return False
    rows, cols = out.shape
    # bitsandbytes' CPU kernel itself falls back to plain torch for odd widths and huge blocks
    if cols % 2 or blocksize >= 2048:
        return False
    blocks = -(-rows * cols // blocksize)
    if (
        packed.dtype != torch.uint8
        or not packed.is_contiguous()
        or packed.numel() != rows * cols // 2
        or absmax.dtype != torch.float32
        or not absmax.is_contiguous()
        or absmax.numel() < blocks
    ):
        return False
    kernel(
        ctypes.c_void_p(packed.data_ptr()),
        ctypes.c_void_p(absmax.data_ptr()),
        ctypes.c_void_p(out.data_ptr()),
        ctypes.c_longlong(blocksize),
        ctypes.c_longlong(rows),
        ctypes.c_longlong(cols),
    )
    return True


def _decode_flat_blocks(
    packed: torch.Tensor, absmax: torch.Tensor, code: torch.Tensor, shape: tuple[int, int]
) -> torch.Tensor:
    """fp32 ``code[nibble] * absmax[block]`` over flat blocks of BLOCKSIZE elements, high
    nibble first: how ``quantize_4bit`` wrote them, whatever the row width.

    Why not ``dequantize_4bit``: bitsandbytes' native CPU decoder (0.50, AVX512) reads each
    row's scales at ``row * (cols // 64)``, right only when a row is whole blocks; for widths
    such as 32, 48 or 80 it returns wrong weights. This is its own pure-torch decode (the one
    it uses for odd widths): one fp32 product per element, so equal wherever both are right.
    """
    n = shape[0] * shape[1]
    nibbles = torch.stack((packed >> 4, packed & 0xF), dim=-1).reshape(-1)[:n]
    values = code[nibbles.long()]
    block = torch.arange(n, device=packed.device) // BLOCKSIZE
    return (values * absmax[block]).reshape(shape)


class NF4Weight(nn.Module):
    """A frozen 2-D weight held as NF4 (block 64), optionally with double-quantized scales.

    Buffers: ``packed`` (uint8, two codes per byte), ``absmax`` (fp32 per block, or uint8 codes
    with double quant), and with double quant ``absmax2`` (fp32 per 256 blocks), ``nested_code``
    (the 256-entry map, shared between weights) and ``offset`` (fp32 scalar). Every method
    returns exactly what ``bitsandbytes.functional.dequantize_4bit`` returns for those elements.
    """

    assay_packed = True
    # Buffers, registered in __init__ (the last three with double quant only).
    packed: torch.Tensor
    absmax: torch.Tensor
    nf4_code: torch.Tensor
    absmax2: torch.Tensor
    nested_code: torch.Tensor
    offset: torch.Tensor

    def __init__(self, weight: torch.Tensor, *, double_quant: bool) -> None:
        super().__init__()
        if weight.dim() != 2:
            raise ConfigError(f"NF4 storage needs a 2-D weight, got shape {tuple(weight.shape)}")
        self.shape = (int(weight.shape[0]), int(weight.shape[1]))
        self.double_quant = double_quant
        packed, state = bnbf.quantize_4bit(
            weight.detach().contiguous(),
            blocksize=BLOCKSIZE,
            quant_type="nf4",
            compress_statistics=double_quant,
        )
        self.register_buffer("packed", packed.reshape(-1))
        self.register_buffer("absmax", state.absmax)
        self.register_buffer("nf4_code", _nested_code(state.code))
        if double_quant:
            self.register_buffer("absmax2", state.state2.absmax)
            self.register_buffer("nested_code", _nested_code(state.state2.code))
            self.register_buffer("offset", state.offset.reshape(()))

    @property
    def row_align(self) -> int:
        """Tiles start on multiples of this many rows, so every tile starts on a block."""
        return BLOCKSIZE // math.gcd(BLOCKSIZE, self.shape[1])

    def storage_tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors a dequantization reads; saved for backward in this order."""
        if self.double_quant:
            return (
                self.packed,
                self.absmax,
                self.nf4_code,
                self.absmax2,
                self.nested_code,
                self.offset,
            )
        return (self.packed, self.absmax, self.nf4_code)

    def _scales(self, tensors: tuple[torch.Tensor, ...], first: int, stop: int) -> torch.Tensor:
        """fp32 absmax of blocks [first, stop), decoding only the nested blocks they touch."""
        absmax = tensors[1]
        if not self.double_quant:
            return absmax[first:stop]
        _, _, _, absmax2, nested_code, offset = tensors
        n0, n1 = first // NESTED_BLOCKSIZE, -(-stop // NESTED_BLOCKSIZE)
        codes = absmax[n0 * NESTED_BLOCKSIZE : n1 * NESTED_BLOCKSIZE]
        scales = bnbf.dequantize_blockwise(
            codes, absmax=absmax2[n0:n1], code=nested_code, blocksize=NESTED_BLOCKSIZE
        )
        scales = scales + offset
        start = first - n0 * NESTED_BLOCKSIZE
        return scales[start : start + stop - first]

    def _decode(
        self,
        packed: torch.Tensor,
        scales: torch.Tensor,
        shape: tuple[int, int],
        dtype,
        code,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if shape[1] % BLOCKSIZE and packed.device.type == "cpu":
            dense = _decode_flat_blocks(packed, scales.float(), code, shape).to(dtype)
            return dense if out is None else out.copy_(dense)
        if out is not None and decode_into(packed, scales.float(), BLOCKSIZE, out):
            return out
        state = bnbf.QuantState(
            absmax=scales.float(),
            shape=torch.Size(shape),
            code=code,
            blocksize=BLOCKSIZE,
            quant_type="nf4",
            dtype=dtype,
        )
        dense = bnbf.dequantize_4bit(packed, state).reshape(shape).to(dtype)
        return dense if out is None else out.copy_(dense)

    def rows(
        self,
        start: int,
        stop: int,
        dtype: torch.dtype,
        tensors: tuple[torch.Tensor, ...] | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Dense rows [start, stop) in ``dtype``; ``start`` must be a multiple of ``row_align``.

        ``tensors`` (from ``storage_tensors``) lets a backward pass decode from what it saved.
        ``out`` (contiguous, ``(stop - start, cols)``, ``dtype``) receives the rows and is
        returned; the values are the same either way.
        """
        tensors = tensors if tensors is not None else self.storage_tensors()
        cols = self.shape[1]
        e0, e1 = start * cols, stop * cols
        scales = self._scales(tensors, e0 // BLOCKSIZE, -(-e1 // BLOCKSIZE))
        packed = tensors[0][e0 // 2 : -(-e1 // 2)]
        return self._decode(packed, scales, (stop - start, cols), dtype, tensors[2], out)

    def gather(self, index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Dense rows ``weight[index]`` (shape ``index.shape + (cols,)``), decoding each once."""
        rows, cols = self.shape
        if cols % BLOCKSIZE:
            raise ConfigError(f"NF4 row lookup needs a width divisible by 64, got {cols}")
        unique, inverse = torch.unique(index.reshape(-1), return_inverse=True)
        per_row = cols // BLOCKSIZE
        blocks = (unique[:, None] * per_row + torch.arange(per_row, device=unique.device)).reshape(
            -1
        )
        packed = self.packed.view(rows, cols // 2)[unique].reshape(-1)
        if self.double_quant:
            nested = torch.unique(blocks // NESTED_BLOCKSIZE)
            span = torch.arange(NESTED_BLOCKSIZE, device=nested.device)
            # The last nested block may be short: clamp, and never read the padding back.
            picks = (nested[:, None] * NESTED_BLOCKSIZE + span).clamp(max=self.absmax.numel() - 1)
            decoded = bnbf.dequantize_blockwise(
                self.absmax[picks.reshape(-1)],
                absmax=self.absmax2[nested],
                code=self.nested_code,
                blocksize=NESTED_BLOCKSIZE,
            )
            decoded = decoded + self.offset
            where = torch.searchsorted(nested, blocks // NESTED_BLOCKSIZE) * NESTED_BLOCKSIZE
            scales = decoded[where + blocks % NESTED_BLOCKSIZE]
        else:
            scales = self.absmax[blocks]
        dense = self._decode(packed, scales, (unique.numel(), cols), dtype, self.nf4_code)
        return dense[inverse].reshape(*index.shape, cols)

    def workspace_bytes(self, tile_rows: int) -> int:
        """Upper bound on bytes one ``rows`` call allocates for a tile of ``tile_rows`` rows."""
        cols = self.shape[1]
        blocks = -(-tile_rows * cols // BLOCKSIZE) + 1
        scale_floats = blocks + (2 * NESTED_BLOCKSIZE if self.double_quant else 0)
        return tile_rows * cols * 4 + scale_floats * 4

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The whole dense matrix (for tests and one-off uses such as adapter initialisation)."""
        return self.rows(0, self.shape[0], dtype)
