"""Malformed GGUF files and safetensors directories, derived from a valid tiny model."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

from corpus_harness import Case

from assay.model.gguf_header import read_header

ALIGN = 32
F32 = 0


def _string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def _typed(value: Any) -> tuple[int, bytes]:
    """(GGUF value type, encoded value) for a Python metadata value."""
    if isinstance(value, bool):
        return 7, struct.pack("<?", value)
    if isinstance(value, int):
        return (
            (4, struct.pack("<I", value)) if 0 <= value < 2**32 else (11, struct.pack("<q", value))
        )
    if isinstance(value, float):
        return 6, struct.pack("<f", value)
    if isinstance(value, str):
        return 8, _string(value)
    if isinstance(value, list):
        item_type = _typed(value[0])[0] if value else 4
        items = b"".join(_typed(v)[1] for v in value)
        return 9, struct.pack("<IQ", item_type, len(value)) + items
    raise TypeError(f"cannot encode {value!r}")


def gguf_bytes(
    metadata: list[tuple[str, Any]],
    tensors: list[tuple[str, list[int], int, int]],
    data: bytes,
    *,
    magic: bytes = b"GGUF",
    version: int = 3,
) -> bytes:
    """A GGUF v3 file: ``tensors`` are (name, GGML-order dims, type, offset in data)."""
    out = magic + struct.pack("<IQQ", version, len(tensors), len(metadata))
    for key, value in metadata:
        vtype, raw = _typed(value)
        out += _string(key) + struct.pack("<I", vtype) + raw
    for name, dims, qtype, offset in tensors:
        out += _string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", qtype, offset)
    return out + b"\0" * (-len(out) % ALIGN) + data


class GGUFParts:
    """The metadata, tensor table and data section of a valid GGUF, ready to be edited."""

    def __init__(self, path: Path) -> None:
        header = read_header(path)
        infos = sorted(header.tensors.values(), key=lambda t: t.offset)
        start = infos[0].offset
        self.metadata = list(header.metadata.items())
        self.tensors = [
            (t.name, list(reversed(t.shape)), int(t.qtype), t.offset - start) for t in infos
        ]
        self.data = path.read_bytes()[start:]

    def build(self, **edits: Any) -> bytes:
        """The file with metadata keys replaced (value None drops the key)."""
        meta = [(k, edits.pop(k, v)) for k, v in self.metadata]
        meta = [(k, v) for k, v in [*meta, *edits.items()] if v is not None]
        return gguf_bytes(meta, self.tensors, self.data)


def _nested_array(depth: int) -> bytes:
    """One metadata value that is an array of an array of ... ``depth`` levels deep."""
    inner = struct.pack("<IQ", 4, 0)
    for _ in range(depth):
        inner = struct.pack("<IQ", 9, 1) + inner
    return inner


def gguf_cases(root: Path, valid: Path) -> list[Case]:
    """GGUF files that ``assay info`` must refuse with one line naming file and offset/field."""
    folder = root / "gguf"
    folder.mkdir(parents=True)
    whole = valid.read_bytes()
    parts = GGUFParts(valid)
    arch = dict(parts.metadata)["general.architecture"]
    first = parts.tensors[0][0]
    n_layers = dict(parts.metadata)[f"{arch}.block_count"]
    bodies: dict[str, tuple[bytes, str]] = {
        "bad_magic": (b"GGML" + whole[4:], "magic"),
        "unsupported_version": (whole[:4] + struct.pack("<I", 9) + whole[8:], "version 9"),
        "empty_file": (b"", "0 bytes"),
        "truncated_in_counts": (whole[:14], "byte offset"),
        "truncated_in_metadata": (whole[:200], "byte offset"),
        "truncated_tensor_data": (whole[:-100], "outside the file"),
        "absurd_counts": (whole[:8] + struct.pack("<Q", 2**62) + whole[16:], "byte offset"),
        "block_count_as_string": (parts.build(**{f"{arch}.block_count": "two"}), "block_count"),
        "block_count_numeric_string": (
            parts.build(**{f"{arch}.block_count": str(n_layers)}),
            "block_count",
        ),
        "head_count_zero": (
            parts.build(**{f"{arch}.attention.head_count": 0}),
            f"{arch}.attention.head_count",
        ),
        "missing_embedding_length": (
            parts.build(**{f"{arch}.embedding_length": None}),
            "embedding_length",
        ),
        "alignment_not_power_of_two": (parts.build(**{"general.alignment": 24}), "alignment"),
        "extra_layer_in_metadata": (
            parts.build(**{f"{arch}.block_count": n_layers + 1}),
            f"layers.{n_layers}.",
        ),
        # issue 52, rule 3: compared with the tensors held before the shape table is built
        "block_count_past_tensors": (
            parts.build(**{f"{arch}.block_count": 1000}),
            "declares 1000 layers",
        ),
        # issue 51: past any model's depth, refused by its range before anything else
        "block_count_out_of_range": (
            parts.build(**{f"{arch}.block_count": 10**9}),
            "block_count must be a positive integer up to 1,024",
        ),
    }
    tensors = parts.tensors
    far = [(tensors[0][0], tensors[0][1], tensors[0][2], 2**40), *tensors[1:]]
    dup = [*tensors, tensors[0]]
    overflow = [(first, [2**32, 2**32, 2**32, 2**32], F32, 0), *tensors[1:]]
    zero_dim = [(first, [0, 4], F32, 0), *tensors[1:]]
    unknown = [(first, tensors[0][1], 999, tensors[0][3]), *tensors[1:]]
    five_dims = [(first, [1, 1, 1, 1, 1], F32, 0), *tensors[1:]]
    meta = parts.metadata
    bodies.update(
        {
            "tensor_offset_outside_file": (gguf_bytes(meta, far, parts.data), first),
            "duplicate_tensor_names": (gguf_bytes(meta, dup, parts.data), "appears twice"),
            "element_count_overflow": (gguf_bytes(meta, overflow, parts.data), first),
            "zero_dimension": (gguf_bytes(meta, zero_dim, parts.data), first),
            "unknown_tensor_type": (gguf_bytes(meta, unknown, parts.data), first),
            "five_dimensions": (gguf_bytes(meta, five_dims, parts.data), "byte offset"),
        }
    )
    key = _string("general.deep") + struct.pack("<I", 9)
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + key
    bodies["deeply_nested_arrays"] = (head + _nested_array(5000), "byte offset")
    bad_key = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _string(b"\xff\xfe") + b"\0" * 16
    bodies["metadata_key_invalid_utf8"] = (bad_key, "byte offset")
    bad_type = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _string("k") + struct.pack("<I", 77)
    bodies["unknown_metadata_type"] = (bad_type + b"\0" * 16, "byte offset")
    cases = []
    for name, (body, where) in bodies.items():
        path = folder / f"{name}.gguf"
        path.write_bytes(body)
        cases.append(Case(f"gguf.{name}", "gguf", ("info", str(path)), path, where, folder))
    return cases


def _st_parts(path: Path) -> tuple[dict[str, Any], bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _st_bytes(header: Any, data: bytes) -> bytes:
    text = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return struct.pack("<Q", len(text)) + text + data


def safetensors_cases(root: Path, valid_dir: Path) -> list[Case]:
    """Model directories whose safetensors or config.json ``assay info`` must refuse."""
    weights = valid_dir / "model.safetensors"
    header, data = _st_parts(weights)
    names = sorted(k for k in header if k != "__metadata__")
    a, b = names[0], names[1]

    def edited(name: str, value: Any) -> dict[str, Any]:
        out = json.loads(json.dumps(header))
        out[name] = value
        return out

    ea, eb = header[a], header[b]
    raw = weights.read_bytes()
    bodies: dict[str, tuple[bytes, str]] = {
        "header_length_past_end": (struct.pack("<Q", len(raw) * 2) + raw[8:], "header length"),
        "tiny_file": (b"\1\2\3", "bytes"),
        "header_not_json": (_st_bytes(b"{not json" + b" " * 8, data), "JSON"),
        "header_not_object": (_st_bytes([1, 2, 3], data), "JSON object"),
        "header_deeply_nested": (_st_bytes(b"[" * 100000 + b"]" * 100000, data), "JSON"),
        "overlapping_ranges": (
            _st_bytes(edited(b, {**eb, "data_offsets": ea["data_offsets"]}), data),
            "overlap",
        ),
        "dtype_size_mismatch": (_st_bytes(edited(a, {**ea, "dtype": "F16"}), data), a),
        "shape_size_mismatch": (
            _st_bytes(edited(a, {**ea, "shape": [*ea["shape"], 3]}), data),
            a,
        ),
        "unknown_dtype": (_st_bytes(edited(a, {**ea, "dtype": "F33"}), data), a),
        "dtype_not_a_string": (_st_bytes(edited(a, {**ea, "dtype": ["F32"]}), data), a),
        "shape_not_a_list": (_st_bytes(edited(a, {**ea, "shape": 7}), data), a),
        "entry_not_an_object": (_st_bytes(edited(a, "F32"), data), a),
        "tensor_past_data_end": (raw[:-64], "outside the data section"),
    }
    cases = []
    for name, (body, where) in bodies.items():
        directory = root / "safetensors" / name
        shutil.copytree(valid_dir, directory)
        (directory / "model.safetensors").write_bytes(body)
        file = directory / "model.safetensors"
        cases.append(
            Case(
                f"safetensors.{name}",
                "safetensors",
                ("info", str(directory)),
                file,
                where,
                directory,
            )
        )
    config = json.loads((valid_dir / "config.json").read_text())
    config_bodies = {
        "config_not_json": (b"{", "config.json"),
        "config_field_wrong_type": (
            json.dumps({**config, "hidden_size": "wide"}).encode(),
            "wide",
        ),
        "config_field_zero": (
            json.dumps({**config, "num_hidden_layers": 0}).encode(),
            "num_hidden_layers",
        ),
        "config_disagrees_with_shapes": (
            json.dumps({**config, "intermediate_size": config["intermediate_size"] + 8}).encode(),
            "mlp.",
        ),
    }
    for name, (body, where) in config_bodies.items():
        directory = root / "safetensors" / name
        shutil.copytree(valid_dir, directory)
        (directory / "config.json").write_bytes(body)
        file = directory / "config.json" if name != "config_disagrees_with_shapes" else directory
        cases.append(
            Case(
                f"safetensors.{name}",
                "safetensors",
                ("info", str(directory)),
                file,
                where,
                directory,
            )
        )
    return cases
