"""Read an HF safetensors model directory (single file or sharded) with its config.json."""

from __future__ import annotations

import itertools
import json
import struct
from pathlib import Path
from typing import cast

import torch
from safetensors import SafetensorError, safe_open

from assay.bounded import parse_json, read_json_file
from assay.errors import ModelFileError
from assay.model.config import ModelConfig, config_from_hf

_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}
# Tensors HF checkpoints may carry that are not parameters of the decoder.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def check_safetensors_header(path: Path) -> dict[str, dict]:
    """Validate a .safetensors file's header before the library maps it.

    Guarantees: the header length fits the file, the header is a JSON object, every tensor's
    dtype is known, its byte range matches dtype x shape, lies inside the data section and
    overlaps no other tensor. Returns the header's tensor entries.
    """
    size = path.stat().st_size
    with path.open("rb") as handle:
        if size < 8:
            raise ModelFileError(f"{path}: truncated safetensors file ({size} bytes)")
        (header_len,) = struct.unpack("<Q", handle.read(8))
        if header_len > size - 8:
            raise ModelFileError(
                f"{path}: header length {header_len} is larger than the file ({size} bytes)"
            )
        raw = handle.read(header_len)
    try:
        header = parse_json(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelFileError(f"{path}: header is not valid JSON ({err})") from None
    if not isinstance(header, dict):
        raise ModelFileError(f"{path}: header is not a JSON object")
    data_size = size - 8 - header_len
    entries = {k: v for k, v in header.items() if k != "__metadata__"}
    ranges = []
    for name, entry in entries.items():
        where = f"{path}: tensor {name!r}"
        try:
            dtype, shape, (start, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ModelFileError(f"{where}: entry lacks dtype, shape or data_offsets") from None
        if not isinstance(dtype, str) or dtype not in _DTYPE_BYTES:
            raise ModelFileError(f"{where}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ModelFileError(f"{where}: bad shape {shape!r}")
        expected = _DTYPE_BYTES[dtype]
        for d in shape:
            expected *= d
        if not (isinstance(start, int) and isinstance(end, int) and 0 <= start <= end):
            raise ModelFileError(f"{where}: bad data_offsets {[start, end]!r}")
        if end - start != expected:
            raise ModelFileError(
                f"{where}: {end - start} bytes do not match dtype {dtype} x shape {shape} "
                f"({expected} bytes)"
            )
        if end > data_size:
            raise ModelFileError(
                f"{where}: bytes [{start}, {end}) run outside the data section "
                f"({data_size} bytes): truncated or corrupt"
            )
        ranges.append((start, end, name))
    ranges.sort()
    for (_, prev_end, prev), (start, _, name) in itertools.pairwise(ranges):
        if start < prev_end:
            raise ModelFileError(f"{path}: tensors {prev!r} and {name!r} overlap")
    return entries


class SafetensorsSource:
    """A validated HF model directory. ``read(name)`` returns one tensor as fp32."""

    def __init__(self, directory: Path) -> None:
        self.path = directory
        config_path = directory / "config.json"
        if not config_path.is_file():
            raise ModelFileError(f"{directory}: no config.json beside the safetensors")
        hf = read_json_file(config_path, ModelFileError)  # size-capped, one-line errors
        if not isinstance(hf, dict):
            raise ModelFileError(f"{config_path}: expected a JSON object of model settings")
        try:
            self.config: ModelConfig = config_from_hf(hf, str(config_path))
        except (ValueError, TypeError, KeyError, AttributeError) as err:  # mistyped fields
            raise ModelFileError(f"{config_path}: a field has the wrong type ({err})") from None
        except ModelFileError as err:  # config checks that do not know the file
            if str(config_path) in str(err):
                raise
            raise ModelFileError(f"{config_path}: {err}") from None
        self.files = self._shard_files(directory)
        self._where: dict[str, Path] = {}
        self._dtypes: dict[str, str] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        for file in self.files:
            for name, entry in check_safetensors_header(file).items():
                if name.endswith(_IGNORED_SUFFIXES):
                    continue
                ours = name.removeprefix("model.")
                if ours in self._where:
                    raise ModelFileError(
                        f"{file}: tensor {name!r} also appears in {self._where[ours]}"
                    )
                self._where[ours] = file
                self._dtypes[ours] = entry["dtype"]
                self._shapes[ours] = tuple(entry["shape"])
        # HF keeps a tied head in some checkpoints; it is the embedding, not a second parameter.
        # A stored head that differs is another model: transformers 5 then unties and computes
        # with it, so reading it as tied would drop a tensor the logits depend on.
        stored = self._where.get("lm_head.weight")
        if self.config.tie_word_embeddings and stored is not None:
            if "embed_tokens.weight" in self._where and not torch.equal(
                self.read("lm_head.weight"), self.read("embed_tokens.weight")
            ):
                raise ModelFileError(
                    f"{stored}: lm_head.weight differs from embed_tokens.weight while "
                    "config.json says tie_word_embeddings true (transformers computes with the "
                    "stored head); set tie_word_embeddings to false"
                )
            self._where.pop("lm_head.weight")

    @staticmethod
    def _shard_files(directory: Path) -> list[Path]:
        index = directory / "model.safetensors.index.json"
        if index.is_file():
            try:
                weight_map = read_json_file(index, ModelFileError)["weight_map"]
            except (KeyError, TypeError) as err:
                raise ModelFileError(f"{index}: not a valid shard index ({err})") from None
            names = weight_map.values() if isinstance(weight_map, dict) else [None]
            if not all(isinstance(n, str) and n and "/" not in n for n in names):
                raise ModelFileError(
                    f"{index}: weight_map must map each tensor to a shard file name in the folder"
                )
            # every name was checked to be a str just above
            files = sorted({directory / cast(str, name) for name in names})
            for file in files:
                if not file.is_file():
                    raise ModelFileError(f"{index}: shard {file.name} is missing")
            return files
        files = sorted(directory.glob("*.safetensors"))
        if not files:
            raise ModelFileError(f"{directory}: no .safetensors file")
        return files

    @property
    def names(self) -> list[str]:
        return list(self._where)

    def tensor_types(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for dtype in self._dtypes.values():
            counts[dtype] = counts.get(dtype, 0) + 1
        return counts

    def shape(self, name: str) -> tuple[int, ...]:
        return self._shapes[name]

    def read(self, name: str) -> torch.Tensor:
        """Tensor ``name`` as a contiguous fp32 tensor."""
        file = self._where.get(name)
        if file is None:
            raise ModelFileError(f"{self.path}: missing tensor {name!r}")
        key = name if name in ("lm_head.weight",) else f"model.{name}"
        try:
            with safe_open(file, framework="pt") as handle:
                if key not in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
                    key = name
                return handle.get_tensor(key).to(torch.float32).contiguous()
        except SafetensorError as err:
            raise ModelFileError(f"{file}: cannot read tensor {name!r} ({err})") from None
