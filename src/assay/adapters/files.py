"""Adapter files: atomic JSON and safetensors writes (through assay.atomic) and JSON reads."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save

from assay.atomic import atomic_write_bytes, atomic_write_json


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
    from assay.errors import ConfigError

    return read_json_file(path, ConfigError)


def spec_from_json(data: Any, where: Path):
    """An AdapterSpec from its saved dict; ConfigError naming ``where`` and the key if not."""
    from assay.adapters.attachment import AdapterSpec
    from assay.errors import ConfigError

    if not isinstance(data, dict):
        raise ConfigError(f"{where}: spec: expected an object")
    try:
        return AdapterSpec.from_dict(data)
    except KeyError as exc:
        raise ConfigError(f"{where}: spec.{exc.args[0]}: required key is missing") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: spec: {exc}") from None
