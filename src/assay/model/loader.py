"""``assay.load``: open, validate, decode and fingerprint a model one layer at a time."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from assay.errors import ModelFileError
from assay.model.config import ModelConfig, check_layers_held
from assay.model.decoder import Decoder
from assay.model.gguf import GGUFSource
from assay.model.safetensors import SafetensorsSource
from assay.model.tensors import set_tensor

_HASH_CHUNK = 1 << 22


class ModelSource(Protocol):
    path: Path
    config: ModelConfig

    @property
    def names(self) -> list[str]: ...

    def shape(self, name: str) -> tuple[int, ...]: ...

    def read(self, name: str) -> torch.Tensor: ...

    def tensor_types(self) -> dict[str, int]: ...


@dataclass(frozen=True)
class Fingerprint:
    """Identity of a loaded model: file bytes, decoded values, size."""

    source_sha256: str
    canonical_sha256: str
    parameter_count: int
    decoded_fp32_bytes: int

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def open_source(path: str | os.PathLike[str]) -> ModelSource:
    """A validated GGUF file or HF safetensors directory; the config is checked against shapes.

    Guarantees: every tensor the config requires is present with the expected shape, and no
    unexpected tensor is present; otherwise one ModelFileError names the file and the tensor.
    """
    p = Path(path)
    if not p.exists():
        raise ModelFileError(f"{p}: no such file or directory")
    if p.is_dir():
        source: ModelSource = SafetensorsSource(p)
    elif p.suffix == ".safetensors" and (p.parent / "config.json").is_file():
        source = SafetensorsSource(p.parent)
    else:
        source = GGUFSource(p)
    present = set(source.names)
    check_layers_held(source.config, present, str(p))
    expected = source.config.expected_shapes()
    for name, shape in expected.items():
        if name not in present:
            raise ModelFileError(f"{p}: missing tensor {name!r}")
        if tuple(source.shape(name)) != shape:
            raise ModelFileError(
                f"{p}: tensor {name!r} has shape {tuple(source.shape(name))}, "
                f"the config says {shape}"
            )
    unexpected = sorted(present - set(expected))
    if unexpected:
        raise ModelFileError(f"{p}: unexpected tensor {unexpected[0]!r} for this config")
    return source


def source_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of the model file's bytes; for a directory, of its files in name order."""
    p = Path(path)
    files = sorted(f for f in p.iterdir() if f.is_file()) if p.is_dir() else [p]
    digest = hashlib.sha256()
    for file in files:
        if p.is_dir():
            digest.update(file.name.encode() + b"\0")
        with file.open("rb") as handle:
            while chunk := handle.read(_HASH_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


class _CanonicalHash:
    """sha256 over (name, shape, fp32 little-endian bytes) in canonical order."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.count = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        self.digest.update(f"{name}:{tuple(tensor.shape)}\0".encode())
        self.digest.update(tensor.detach().to(torch.float32).contiguous().numpy().tobytes())
        self.count += tensor.numel()


LayerHook = Callable[[nn.Module], object]


def load_with_fingerprint(
    path: str | os.PathLike[str],
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device | None = "cpu",
    layer_hook: LayerHook | None = None,
    model_hook: LayerHook | None = None,
) -> tuple[Decoder, Fingerprint]:
    """Load the model and fingerprint it in one pass over the tensors.

    Layers are materialised one at a time and ``layer_hook(layer)`` runs on each straight
    away (storage packs it there), so peak memory is one dense layer plus what the hook kept;
    ``model_hook(model)`` runs once at the end, before the move to ``device`` (None: no move,
    for a hook that left a layer's tensors elsewhere). Base parameters come back frozen
    (``requires_grad=False``); adapters decide what trains.
    """
    source = open_source(path)
    config = source.config
    with torch.device("meta"):
        model = Decoder(config)
    hasher = _CanonicalHash()
    order = list(config.expected_shapes())

    def materialise(names: list[str]) -> None:
        for name in names:
            tensor = source.read(name)
            hasher.add(name, tensor)
            set_tensor(model, name, tensor.to(dtype))

    materialise([n for n in order if n.startswith("embed_tokens.")])
    for index, layer in enumerate(model.layers):
        materialise([n for n in order if n.startswith(f"layers.{index}.")])
        if layer_hook is not None:
            layer_hook(layer)
    materialise([n for n in order if n.startswith(("norm.", "lm_head."))])
    if config.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    if model_hook is not None:
        model_hook(model)
    if device is not None:
        model.to(device)
    fingerprint = Fingerprint(
        source_sha256=source_sha256(path),
        canonical_sha256=hasher.digest.hexdigest(),
        parameter_count=hasher.count,
        decoded_fp32_bytes=hasher.count * 4,
    )
    model.fingerprint = fingerprint
    # what an export names as its base, as PEFT's base_model_name_or_path and revision do (a
    # config naming a Hub model replaces the path with that name)
    model.assay_source = Path(path).resolve()  # the file or folder read (a Hub name's snapshot)
    model.assay_base_model = {"name_or_path": str(model.assay_source), "revision": None}
    return model, fingerprint
