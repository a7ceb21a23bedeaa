"""TinyLoRA's own on-disk format: ``tinylora_config.json`` + ``tinylora_model.safetensors``.

The file holds the trainable vector(s) and every fixed buffer (U, S, V^T, P) of every target,
so a reload onto the same base model reproduces the adapted function bit for bit without
recomputing the SVD (which may round differently on another machine). With global sharing
the one shared vector is stored once, as ``tiny_v``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from assay.adapters.attachment import AdapterSpec, adapter_modules, attach
from assay.adapters.base_identity import base_record, check_recorded_base
from assay.adapters.files import (
    load_exactly,
    open_safetensors,
    read_json,
    spec_from_json,
    write_json_atomic,
    write_safetensors_atomic,
)
from assay.adapters.manifest import verify_manifest
from assay.errors import ConfigError
from assay.settings.methods import method as registered

if TYPE_CHECKING:
    from assay.adapters.tinylora import TinyLoRALinear
    from assay.model.decoder import Decoder

CONFIG = "tinylora_config.json"
WEIGHTS = "tinylora_model.safetensors"
FORMAT = "assay-tinylora/1"
_BUFFERS = ("tiny_U", "tiny_S", "tiny_V", "tiny_P")


def tinylora_state(model: nn.Module, spec: AdapterSpec) -> dict[str, torch.Tensor]:
    """Key -> tensor for everything a reload needs (the shared vector once)."""
    out: dict[str, torch.Tensor] = {}
    shared = spec.options.get("sharing") == "global"
    for name, module in adapter_modules(model):
        for buffer in _BUFFERS:
            out[f"{name}.{buffer}"] = getattr(module, buffer)
        # a tinylora spec's adapters are all TinyLoRALinear
        if shared:
            out["tiny_v"] = cast("TinyLoRALinear", module).tiny_v
        else:
            out[f"{name}.tiny_v"] = cast("TinyLoRALinear", module).tiny_v
    return out


def save_tinylora(model: nn.Module, out: str | os.PathLike[str]) -> Path:
    spec = getattr(model, "assay_adapter_spec", None)
    if spec is None or not registered(spec.method).svd_basis:
        raise ConfigError("save_tinylora needs a model with a tinylora adapter attached")
    if any(m.merged for _, m in adapter_modules(model)):
        raise ConfigError("cannot save a merged adapter; unmerge it first")
    folder = Path(out)
    write_safetensors_atomic(folder / WEIGHTS, tinylora_state(model, spec), {"format": "pt"})
    config: dict = {"format": FORMAT, "spec": spec.to_dict()}
    config.update(base_record(model))
    write_json_atomic(folder / CONFIG, config)
    return folder


def load_tinylora(model: Decoder, path: str | os.PathLike[str]) -> nn.Module:
    """Attach and fill a tinylora adapter from ``path``; every key and shape is checked."""
    folder = Path(path)
    verify_manifest(folder)
    config = read_json(folder / CONFIG)
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        got = config.get("format") if isinstance(config, dict) else config
        raise ConfigError(f"{folder / CONFIG}: format {got!r}; need {FORMAT!r}")
    # U, S and V^T are the base's SVD: on another base the same file is another function
    check_recorded_base(folder / CONFIG, model, config, folder=folder)
    spec = spec_from_json(config.get("spec"), folder / CONFIG)
    _check_declared_sizes(folder, spec)  # before attach allocates u- and r-sized buffers
    attach(
        model,
        "tinylora",
        rank=spec.rank,
        alpha=spec.alpha,
        targets=list(spec.targets),
        layers=spec.layers,
        seed=spec.seed,
        **spec.options,
    )
    load_exactly(folder / WEIGHTS, tinylora_state(model, spec))
    return model


def _check_declared_sizes(folder: Path, spec: AdapterSpec) -> None:
    """ConfigError naming the config when a stored vector or projection is not of the sizes
    (u, r) the config declares, read from the safetensors header before anything they size
    is allocated."""
    u, r = spec.options.get("u"), spec.options.get("r")
    weights = folder / WEIGHTS
    declared = {"tiny_v": (u,), "tiny_P": (u, r, r), "tiny_S": (r,)}
    with open_safetensors(weights) as handle:
        vectors = 0
        for key in sorted(handle.keys()):
            want = declared.get(key.rsplit(".", 1)[-1])
            shape = tuple(handle.get_slice(key).get_shape())
            vectors += key.rsplit(".", 1)[-1] == "tiny_v"
            if want is not None and shape != want:
                raise ConfigError(
                    f"{folder / CONFIG}: spec: declares u={u}, r={r}, but {WEIGHTS} holds {key} "
                    f"of shape {shape}"
                )
    if not vectors:
        raise ConfigError(f"{weights}: holds no tiny_v vector to check u={u} against")


# the folder-format contract of assay.settings.methods.FILE_FORMATS
save = save_tinylora
load = load_tinylora
