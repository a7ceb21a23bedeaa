"""Adapter files: atomic JSON and safetensors writes (through assay.atomic), JSON reads, and the
checked opening and loading of a safetensors file both adapter formats share."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save

from assay.atomic import atomic_write_bytes, atomic_write_json
from assay.errors import ConfigError


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> Path:
    """Sorted, indented JSON written atomically (see assay.atomic)."""
    atomic_write_json(path, data)
    return Path(path)


def write_safetensors_atomic(
    path: str | os.PathLike[str],
    tensors: dict[str, torch.Tensor],
    metadata: dict[str, str] | None = None,
) -> Path:
    """Contiguous, CPU, unshared copies of ``tensors`` as one safetensors file."""
    plain = {k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}
    atomic_write_bytes(path, save(plain, metadata=metadata))
    return Path(path)


def read_json(path: Path) -> Any:
    """The JSON in ``path`` (size-capped); ConfigError naming the file if absent or invalid."""
    from assay.bounded import read_json_file

    return read_json_file(path, ConfigError)


def open_safetensors(weights: Path) -> Any:
    """``safe_open(weights)`` for use as a context manager; ConfigError naming the file when it
    is absent or not a readable safetensors file (torn or truncated)."""
    if not weights.is_file():
        raise ConfigError(f"{weights}: no such file")
    try:
        return safe_open(weights, framework="pt")
    except SafetensorError as error:
        raise ConfigError(f"{weights}: not a readable safetensors file ({error})") from None


def load_exactly(weights: Path, expected: dict[str, torch.Tensor]) -> None:
    """Copy each tensor of ``weights`` into the tensor of ``expected`` under its key, bit for
    bit. ConfigError naming the file and a key when a key is missing or extra, or a shape
    differs; nothing is copied before every key is known to be present."""
    with open_safetensors(weights) as handle, torch.no_grad():
        stored = set(handle.keys())
        missing, extra = sorted(set(expected) - stored), sorted(stored - set(expected))
        if missing or extra:
            what = f"missing {missing[0]}" if missing else f"unexpected {extra[0]}"
            raise ConfigError(f"{weights}: {what} ({len(missing)} missing, {len(extra)} extra)")
        for key, target in expected.items():
            value = handle.get_tensor(key)
            if value.shape != target.shape:
                raise ConfigError(
                    f"{weights}: {key} has shape {tuple(value.shape)}, "
                    f"expected {tuple(target.shape)}"
                )
            target.copy_(value)


def spec_from_json(data: Any, where: Path):
    """An AdapterSpec from its saved dict; ConfigError naming ``where`` and the key if not."""
    from assay.adapters.attachment import AdapterSpec

    if not isinstance(data, dict):
        raise ConfigError(f"{where}: spec: expected an object")
    try:
        return AdapterSpec.from_dict(data)
    except KeyError as exc:
        raise ConfigError(f"{where}: spec.{exc.args[0]}: required key is missing") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: spec: {exc}") from None
