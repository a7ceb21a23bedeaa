"""Adapter files: atomic JSON and safetensors writes (through assay.atomic) and JSON reads."""

from __future__ import annotations

import json
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
    from assay.errors import ConfigError

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path}: not valid JSON ({error.msg} at line {error.lineno})") from None
