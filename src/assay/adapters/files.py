"""Atomic file writes: temp file in the same folder, fsync, rename. Never a partial file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> Path:
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_safetensors_atomic(
    path: str | os.PathLike[str],
    tensors: dict[str, torch.Tensor],
    metadata: dict[str, str] | None = None,
) -> Path:
    """Contiguous, CPU, unshared copies of ``tensors`` as one safetensors file."""
    plain = {k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}
    return write_bytes_atomic(path, save(plain, metadata=metadata))


def read_json(path: Path) -> Any:
    from assay.errors import ConfigError

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path}: not valid JSON ({error.msg} at line {error.lineno})") from None
