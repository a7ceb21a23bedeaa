"""A bounds-checked parser of the GGUF header: metadata and the tensor-info table.

Every length and offset is checked against the file size before it is trusted, so a truncated
or hostile file ends in one ModelFileError that names the file and the byte offset, never in a
crash, a huge allocation or a hang.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from assay.errors import ModelFileError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
_MAX_DIMS = 4
_MAX_NESTING = 16  # arrays of arrays deeper than this are hostile, not a model

# GGUF metadata value types -> struct format (scalars only; 8 = string, 9 = array).
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry: numpy-order shape (outermost first), type and absolute byte range."""

    name: str
    shape: tuple[int, ...]
    qtype: GGMLQuantizationType
    offset: int
    nbytes: int

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class GGUFHeader:
    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: dict[str, TensorInfo]
    file_size: int


class _Cursor:
    def __init__(self, data: memoryview, path: Path) -> None:
        self.data, self.pos, self.path = data, 0, path

    def fail(self, what: str) -> ModelFileError:
        return ModelFileError(f"{self.path}: {what} at byte offset {self.pos}")

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(
                f"truncated file: {what} needs {n} bytes, {len(self.data) - self.pos} remain"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.scalar("<Q", what)
        raw = bytes(self.take(n, what))  # a copy: a live slice would pin the mmap open
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise self.fail(f"{what} is not valid UTF-8") from err

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if depth > _MAX_NESTING:
            raise self.fail(f"{what}: arrays nested more than {_MAX_NESTING} deep")
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype], what)
        if vtype == _STRING:
            return self.string(what)
        if vtype == _ARRAY:
            item_type = self.scalar("<I", what)
            count = self.scalar("<Q", what)
            if count > len(self.data) - self.pos:  # every item takes at least one byte
                raise self.fail(f"{what}: array of {count} items cannot fit in the file")
            if item_type in _SCALARS:
                fmt = _SCALARS[item_type]
                size = struct.calcsize(fmt)
                raw = self.take(size * count, what)
                return np.frombuffer(raw, dtype=np.dtype(fmt)).tolist()
            return [self.value(item_type, what, depth + 1) for _ in range(count)]
        raise self.fail(f"{what}: unknown metadata value type {vtype}")


def tensor_nbytes(qtype: GGMLQuantizationType, shape: tuple[int, ...], where: str) -> int:
    """Bytes a tensor of this type and numpy-order shape occupies; rows must fill whole blocks."""
    block, type_size = GGML_QUANT_SIZES[qtype]
    if shape and shape[-1] % block:
        raise ModelFileError(
            f"{where}: row length {shape[-1]} is not a multiple of the {qtype.name} block {block}"
        )
    return math.prod(shape) // block * type_size


def read_header(path: Path) -> GGUFHeader:
    """Parse and validate the header of the GGUF file at ``path``.

    Guarantees: magic and version are known; every metadata value and tensor entry lies inside
    the file; every tensor's type is known, its dimensions are positive, and its data range
    lies inside the file; no two tensors share a name.
    """
    file_size = path.stat().st_size
    if file_size < len(GGUF_MAGIC):
        raise ModelFileError(f"{path}: truncated file ({file_size} bytes), not a GGUF file")
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        try:
            return _parse(_Cursor(view, path), file_size)
        finally:
            view.release()


def _parse(cur: _Cursor, file_size: int) -> GGUFHeader:
    path = cur.path
    magic = bytes(cur.take(4, "magic"))
    if magic != GGUF_MAGIC:
        raise ModelFileError(f"{path}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
    version = cur.scalar("<I", "version")
    if version not in SUPPORTED_VERSIONS:
        raise ModelFileError(
            f"{path}: GGUF version {version} is not supported "
            f"(expected {' or '.join(map(str, SUPPORTED_VERSIONS))})"
        )
    n_tensors = cur.scalar("<Q", "tensor count")
    n_kv = cur.scalar("<Q", "metadata count")
    if n_tensors > file_size or n_kv > file_size:
        raise cur.fail(f"absurd counts ({n_tensors} tensors, {n_kv} metadata entries)")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string("metadata key")
        vtype = cur.scalar("<I", f"type of {key}")
        if key in metadata:
            raise cur.fail(f"duplicate metadata key {key!r}")
        metadata[key] = cur.value(vtype, f"metadata {key!r}")
    entries = []
    for _ in range(n_tensors):
        name = cur.string("tensor name")
        n_dims = cur.scalar("<I", f"dims of tensor {name!r}")
        if not 1 <= n_dims <= _MAX_DIMS:
            raise cur.fail(f"tensor {name!r} has {n_dims} dimensions (expected 1 to {_MAX_DIMS})")
        dims = [cur.scalar("<Q", f"shape of tensor {name!r}") for _ in range(n_dims)]
        raw_type = cur.scalar("<I", f"type of tensor {name!r}")
        rel_offset = cur.scalar("<Q", f"offset of tensor {name!r}")
        entries.append((name, dims, raw_type, rel_offset))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise ModelFileError(f"{path}: general.alignment {alignment!r} is not a power of two")
    data_start = -(-cur.pos // alignment) * alignment
    tensors: dict[str, TensorInfo] = {}
    for name, dims, raw_type, rel_offset in entries:
        where = f"{path}: tensor {name!r}"
        if name in tensors:
            raise ModelFileError(f"{where} appears twice")
        try:
            qtype = GGMLQuantizationType(raw_type)
        except ValueError:
            raise ModelFileError(f"{where} has unknown type {raw_type}") from None
        if any(d <= 0 for d in dims) or math.prod(dims) > file_size * 64:
            raise ModelFileError(f"{where} has an absurd shape {dims}")
        shape = tuple(reversed(dims))  # GGML lists the innermost dimension first
        nbytes = tensor_nbytes(qtype, shape, where)
        start = data_start + rel_offset
        if start + nbytes > file_size:
            raise ModelFileError(
                f"{where} bytes [{start}, {start + nbytes}) run outside the file "
                f"({file_size} bytes): truncated or corrupt"
            )
        tensors[name] = TensorInfo(name, shape, qtype, start, nbytes)
    return GGUFHeader(path, version, metadata, tensors, file_size)
