"""Travelling weights: a SmolLM2-shaped GGUF rebuilt on a bare box from a small skeleton.

The real SmolLM2 GGUF (98 MB) does not fit what a GPU box can carry. Its *skeleton* does: every
metadata field (tokenizer, chat template, hyper-parameters) and every tensor's name, shape and
GGML type, without the tensor bytes (about 0.5 MB gzipped). ``write_travel_model`` fills the
skeleton with seeded random values, quantized to the same GGML types as the original, so every
loader, tokenizer and reference path (assay, transformers' ``gguf_file=``) runs the code it runs
on the real file; only the weight values differ. The result is deterministic: the same skeleton
and seed give the same bytes, and its sha256 is recorded beside the skeleton.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from assay.atomic import fsync_file
from assay.errors import AssayError
from assay.model.gguf_export import finish_gguf
from assay.qualify.core.source import file_sha256

SKELETON_FORMAT = "assay.gguf-skeleton/1"
# Values a random SmolLM2-sized decoder keeps finite and non-degenerate with: init-scale weights,
# norms near one.
WEIGHT_STD = 0.02


def _field_value(field: Any) -> Any:
    """A GGUFReader field as plain JSON (strings decoded, arrays as lists)."""
    from gguf import GGUFValueType

    kind = field.types[0]
    if kind == GGUFValueType.ARRAY:
        sub = field.types[-1]
        items = [field.parts[i] for i in field.data]
        if sub == GGUFValueType.STRING:
            return [bytes(x).decode("utf-8") for x in items]
        return [x.tolist()[0] for x in items]
    part = field.parts[field.data[0]]
    if kind == GGUFValueType.STRING:
        return bytes(part).decode("utf-8")
    return part.tolist()[0]


def extract_skeleton(gguf_path: Path) -> dict[str, Any]:
    """The skeleton of a GGUF file: metadata fields (with their GGUF types) and tensor specs."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf_path))
    fields = []
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue  # header bookkeeping the writer regenerates
        fields.append(
            {
                "key": key,
                "type": field.types[0].name,
                "sub_type": field.types[-1].name if len(field.types) > 1 else None,
                "value": _field_value(field),
            }
        )
    tensors = [
        {"name": t.name, "shape": [int(d) for d in t.shape], "type": t.tensor_type.name}
        for t in reader.tensors
    ]
    digest = hashlib.sha256()
    with Path(gguf_path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return {
        "format": SKELETON_FORMAT,
        "source": Path(gguf_path).name,
        "source_sha256": digest.hexdigest(),
        "architecture": reader.fields["general.architecture"].contents(),
        "fields": fields,
        "tensors": tensors,
    }


def save_skeleton(skeleton: dict[str, Any], path: Path) -> Path:
    """Write the skeleton as gzipped JSON (deterministic bytes: mtime 0, sorted keys)."""
    raw = json.dumps(skeleton, sort_keys=True, ensure_ascii=False).encode("utf-8")
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as handle, gzip.GzipFile(fileobj=handle, mode="wb", mtime=0) as gz:
        gz.write(raw)
    fsync_file(tmp)
    os.replace(tmp, path)
    return path


def load_skeleton(path: Path) -> dict[str, Any]:
    """A skeleton written by ``save_skeleton``; AssayError names the file if it is not one."""
    try:
        data = json.loads(gzip.decompress(Path(path).read_bytes()))
    except (OSError, ValueError) as err:
        raise AssayError(f"{path}: not a gzipped GGUF skeleton ({err})") from None
    if not isinstance(data, dict) or data.get("format") != SKELETON_FORMAT:
        raise AssayError(f"{path}: format is not {SKELETON_FORMAT!r}")
    return data


def _values(rng: np.random.Generator, spec: dict[str, Any]) -> np.ndarray:
    # GGUF lists shapes fastest-dimension first; numpy wants them reversed.
    shape = tuple(reversed(spec["shape"]))
    if len(shape) == 1:  # norms: near one, as a trained model's are
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    return (WEIGHT_STD * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)


def write_travel_model(skeleton: dict[str, Any], path: Path, *, seed: int = 0) -> Path:
    """Write a GGUF with the skeleton's metadata and tensor specs and seeded random values.

    Guarantees: same tensor names, shapes and GGML types as the skeleton's source, every
    metadata field copied with its type; the bytes depend only on (skeleton, seed). Written to
    a temp name, fsynced and renamed.
    """
    from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter, quants

    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    writer = GGUFWriter(str(tmp), skeleton["architecture"])
    rng = np.random.default_rng(seed)
    try:
        for field in skeleton["fields"]:
            if field["key"] == "general.architecture":
                continue  # the writer adds it
            sub = GGUFValueType[field["sub_type"]] if field["sub_type"] else None
            writer.add_key_value(field["key"], field["value"], GGUFValueType[field["type"]], sub)
        writer.add_string("general.description", f"assay travelling weights, seed {seed}")
        for spec in skeleton["tensors"]:
            qtype = GGMLQuantizationType[spec["type"]]
            values = _values(rng, spec)
            if qtype == GGMLQuantizationType.F32:
                writer.add_tensor(spec["name"], values)
            else:
                packed = quants.quantize(values, qtype)
                writer.add_tensor(spec["name"], packed, raw_dtype=qtype)
        finish_gguf(writer, tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m assay_testing.gguf_skeleton SKELETON OUT.gguf [--seed N]``: rebuild on the
    box."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m assay_testing.gguf_skeleton", description=main.__doc__
    )
    parser.add_argument("skeleton", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        written = write_travel_model(load_skeleton(args.skeleton), args.out, seed=args.seed)
    except AssayError as err:
        print(f"error: {err}")
        return 2
    print(f"{written} sha256 {file_sha256(written)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
