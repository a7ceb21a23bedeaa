"""The PEFT on-disk format for lora, rslora, lora_fa and dora.

A folder with ``adapter_config.json`` (a PEFT 0.21 ``LoraConfig``) and
``adapter_model.safetensors`` whose keys are PEFT's: for a projection ``layers.N.self_attn.q_proj``
``base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight``, ``...lora_B.weight`` and,
for DoRA, ``...lora_magnitude_vector`` (no ``.weight`` suffix on disk). PEFT cannot tell
LoRA-FA from LoRA (only the optimizer differs), so assay adds ``assay_adapter.json`` with its
own spec; PEFT ignores that file, and a folder without it loads as lora, rslora or dora.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from assay.adapters.inject import GROUPS, PARENT
from assay.adapters.manifest import verify_manifest
from assay.errors import ConfigError
from assay.settings.methods import PEFT_METHODS, from_peft_flags
from assay.settings.methods import method as registered

if TYPE_CHECKING:
    from assay.model.decoder import Decoder

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
SIDECAR = "assay_adapter.json"
PREFIX = "base_model.model.model."


def peft_key(module_name: str, tensor: str) -> str:
    """PEFT's saved key for one of our adapter tensors (``lora_A``, ``lora_B``, magnitude)."""
    suffix = tensor if tensor == "lora_magnitude_vector" else f"{tensor}.weight"
    return f"{PREFIX}{module_name}.{suffix}"


def peft_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every adapter tensor of ``model`` under its PEFT key."""
    out: dict[str, torch.Tensor] = {}
    for name, module in adapter_modules(model):
        for tensor, value in module.named_parameters(recurse=False):
            out[peft_key(name, tensor)] = value
    return out


def peft_config(spec: AdapterSpec, model: Decoder) -> dict[str, Any]:
    """A PEFT 0.21 LoraConfig dict for ``spec``."""
    all_layers = list(spec.layers) == list(range(len(model.layers)))
    base = getattr(model, "assay_base_model", None) or {}
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "auto_mapping": None,
        "base_model_name_or_path": base.get("name_or_path"),
        "revision": base.get("revision"),
        "inference_mode": True,
        "r": spec.rank,
        "lora_alpha": spec.alpha,
        "lora_dropout": float(spec.options.get("dropout", 0.0)),
        "target_modules": list(spec.targets),
        "layers_to_transform": None if all_layers else list(spec.layers),
        "layers_pattern": None,
        **registered(spec.method).peft_flags(),
        "bias": "none",
        "fan_in_fan_out": False,
        "init_lora_weights": True,
        "modules_to_save": None,
        "rank_pattern": {},
        "alpha_pattern": {},
        "lora_bias": False,
    }


def save_peft(model: Decoder, out: str | os.PathLike[str]) -> Path:
    """Write ``model``'s adapter as a PEFT folder at ``out`` (files written atomically)."""
    spec = getattr(model, "assay_adapter_spec", None)
    if spec is None or spec.method not in PEFT_METHODS:
        method = None if spec is None else spec.method
        raise ConfigError(f"PEFT format holds {', '.join(PEFT_METHODS)}; this model has {method}")
    if any(m.merged for _, m in adapter_modules(model)):
        raise ConfigError("cannot save a merged adapter in PEFT format; unmerge it first")
    folder = Path(out)
    config = peft_config(spec, model)
    write_safetensors_atomic(folder / WEIGHTS, peft_state(model), metadata={"format": "pt"})
    write_json_atomic(folder / CONFIG, config)
    side: dict[str, Any] = {"format": "assay-peft/1", "spec": spec.to_dict()}
    side.update(base_record(model))
    write_json_atomic(folder / SIDECAR, side)
    return folder


def check_base(folder: Path, model: nn.Module) -> None:
    """ConfigError, naming both, when the folder's recorded base model is not ``model``; a
    one-line warning when nothing was recorded (a folder PEFT wrote: shapes are checked, the
    base model itself cannot be)."""
    sidecar = folder / SIDECAR
    side = read_json(sidecar) if sidecar.is_file() else None
    recorded = side if isinstance(side, dict) else {}
    config = read_json(folder / CONFIG)
    named = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    check_recorded_base(sidecar, model, recorded, named, folder)


def _targets(value: Any, where: Path) -> list[str]:
    if value == "all-linear":
        return list(GROUPS["all-linear"])
    if isinstance(value, str) or not value:
        raise ConfigError(f"{where}: target_modules {value!r} unsupported; expected a name list")
    names = [str(n).rsplit(".", 1)[-1] for n in value]
    unknown = [n for n in names if n not in PARENT]
    if unknown:
        raise ConfigError(f"{where}: target_modules {unknown} are not decoder projections")
    return names


# key -> (accepted JSON types, required); bool is excluded from int/float explicitly below.
_TYPES: dict[str, tuple[tuple[type, ...], bool]] = {
    "peft_type": ((str,), True),
    "r": ((int,), True),
    "lora_alpha": ((int, float), True),
    "target_modules": ((list, str), True),
    "layers_to_transform": ((list, int, type(None)), False),
    "use_rslora": ((bool,), False),
    "use_dora": ((bool,), False),
    "lora_dropout": ((int, float, type(None)), False),
}


def _check_types(cfg: dict[str, Any], where: Path) -> None:
    """ConfigError naming the file and key for a missing key or a wrong-typed value."""
    for key, (types, required) in _TYPES.items():
        if key not in cfg:
            if required:
                raise ConfigError(f"{where}: {key}: required key is missing")
            continue
        value = cfg[key]
        numeric = int in types or float in types
        if not isinstance(value, types) or (numeric and isinstance(value, bool)):
            names = " or ".join(t.__name__ for t in types).replace("NoneType", "null")
            raise ConfigError(f"{where}: {key}: expected {names}, got {value!r}")
    if cfg["r"] < 1:
        raise ConfigError(f"{where}: r: must be >= 1, got {cfg['r']}")
    if not math.isfinite(cfg["lora_alpha"]) or cfg["lora_alpha"] <= 0:
        raise ConfigError(f"{where}: lora_alpha: must be a finite number > 0")
    dropout = cfg.get("lora_dropout")
    if dropout is not None and not 0 <= dropout < 1:
        raise ConfigError(f"{where}: lora_dropout: must be in [0, 1), got {dropout!r}")
    layers = cfg.get("layers_to_transform")
    items = layers if isinstance(layers, list) else [] if layers is None else [layers]
    if any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in items):
        raise ConfigError(f"{where}: layers_to_transform: expected non-negative integers")


def spec_from_peft(folder: Path, num_layers: int) -> AdapterSpec:
    """The AdapterSpec a PEFT folder describes (the assay sidecar wins where present)."""
    verify_manifest(folder)
    where = folder / CONFIG
    cfg = read_json(where)
    if not isinstance(cfg, dict):
        raise ConfigError(f"{where}: expected a JSON object of LoraConfig fields")
    _check_types(cfg, where)
    if cfg.get("peft_type") != "LORA":
        raise ConfigError(f"{where}: peft_type {cfg.get('peft_type')!r}; expected 'LORA'")
    for field, neutral in (
        ("bias", "none"),
        ("fan_in_fan_out", False),
        ("rank_pattern", {}),
        ("alpha_pattern", {}),
        ("modules_to_save", None),
        ("lora_bias", False),
    ):
        if cfg.get(field, neutral) not in (neutral, None, {}):
            raise ConfigError(f"{where}: {field}={cfg[field]!r} is not supported")
    layers = cfg.get("layers_to_transform")
    layers = list(range(num_layers)) if layers is None else layers
    layers = [layers] if isinstance(layers, int) else layers
    outside = [i for i in layers if i >= num_layers]
    if outside:
        raise ConfigError(
            f"{where}: layers_to_transform: {outside[0]} is not a layer of the model (valid "
            f"0..{num_layers - 1}, it has {num_layers} layers)"
        )
    if cfg.get("use_dora") and cfg.get("use_rslora"):
        # Found by the PEFT round trip now in gate-exports: this used to load with alpha/r.
        raise ConfigError(
            f"{where}: use_dora with use_rslora is not supported (DoRA scales by alpha/r)"
        )
    method = from_peft_flags(cfg)
    dropout = float(cfg.get("lora_dropout") or 0.0)
    problem = registered(method).scale_problem(int(cfg["r"]), float(cfg["lora_alpha"]))
    if problem:
        raise ConfigError(f"{where}: lora_alpha: {problem}")
    spec = AdapterSpec(
        method,
        int(cfg["r"]),
        float(cfg["lora_alpha"]),
        tuple(_targets(cfg.get("target_modules"), where)),
        tuple(int(i) for i in layers),
        0,
        {"dropout": dropout} if dropout else {},
    )
    sidecar = folder / SIDECAR
    if sidecar.is_file():
        side = read_json(sidecar)
        ours = spec_from_json(side.get("spec") if isinstance(side, dict) else None, sidecar)
        if (ours.rank, ours.alpha, set(ours.targets), set(ours.layers)) != (
            spec.rank,
            spec.alpha,
            set(spec.targets),
            set(spec.layers),
        ) or registered(ours.method).peft_flags() != registered(spec.method).peft_flags():
            raise ConfigError(f"{sidecar}: disagrees with {CONFIG}")
        spec = ours
    return spec


def load_peft(model: Decoder, path: str | os.PathLike[str]) -> nn.Module:
    """Attach the adapter stored in a PEFT folder to a fresh ``model`` and load its tensors.

    Guarantees: every tensor the adapter needs is in the file with the right shape and no
    other tensor is; otherwise ConfigError names the key. Values are copied bit for bit.
    """
    folder = Path(path)
    verify_manifest(folder)
    check_base(folder, model)  # first: an adapter of another base is named as that
    spec = spec_from_peft(folder, len(model.layers))
    _check_declared_rank(folder / WEIGHTS, spec.rank)  # before attach allocates r-sized factors
    attach(
        model,
        spec.method,
        rank=spec.rank,
        alpha=spec.alpha,
        targets=list(spec.targets),
        layers=spec.layers,
        seed=spec.seed,
        **spec.options,
    )
    load_exactly(folder / WEIGHTS, peft_state(model))
    return model


def _check_declared_rank(weights: Path, rank: int) -> None:
    """ConfigError naming the file when a factor in ``weights`` is not of the rank
    ``adapter_config.json`` declares: read from the safetensors header, before anything the
    declared rank sizes is allocated (``r: 1000000000`` beside rank-4 weights)."""
    with open_safetensors(weights) as handle:
        factors = 0
        for key in sorted(handle.keys()):
            shape = handle.get_slice(key).get_shape()
            axis = 0 if ".lora_A." in key else 1 if ".lora_B." in key else None
            factors += axis is not None
            if axis is not None and (len(shape) != 2 or shape[axis] != rank):
                raise ConfigError(
                    f"{weights.with_name(CONFIG)}: r: declares {rank}, but {weights.name} holds "
                    f"{key} of shape {tuple(shape)}"
                )
    if not factors:
        raise ConfigError(f"{weights}: holds no lora_A or lora_B factor to check r={rank} against")


# the folder-format contract of assay.settings.methods.FILE_FORMATS
save = save_peft
load = load_peft
