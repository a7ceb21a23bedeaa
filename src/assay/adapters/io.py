"""``save_adapter`` / ``load_adapter``: the right on-disk format for each method.

lora, rslora, lora_fa and dora use PEFT's format (``peft_io``); tinylora uses its own
(``tinylora_io``); ``full`` has no adapter to save (use ``assay.export.export_merged``).
"""

from __future__ import annotations

import os
from pathlib import Path

from torch import nn

from assay.adapter_registry import method as registered
from assay.adapters import peft_io, tinylora_io
from assay.errors import ConfigError


def save_adapter(model: nn.Module, out: str | os.PathLike[str]) -> Path:
    """Write the adapter of ``model`` to the folder ``out``; returns the folder."""
    spec = getattr(model, "assay_adapter_spec", None)
    if spec is None:
        raise ConfigError("the model has no adapter attached; nothing to save")
    saved_as = registered(spec.method).saved_as
    if saved_as is None:
        raise ConfigError(
            f"method {spec.method!r} has no separate adapter; export the merged model"
        )
    if saved_as == "assay":
        return tinylora_io.save_tinylora(model, out)
    return peft_io.save_peft(model, out)


def load_adapter(model: nn.Module, path: str | os.PathLike[str]) -> nn.Module:
    """Attach the adapter saved in folder ``path`` to a fresh ``model`` and return it."""
    folder = Path(path)
    if (folder / tinylora_io.CONFIG).is_file():
        return tinylora_io.load_tinylora(model, folder)
    if (folder / peft_io.CONFIG).is_file():
        return peft_io.load_peft(model, folder)
    raise ConfigError(
        f"{folder}: no {peft_io.CONFIG} or {tinylora_io.CONFIG}; not an adapter folder"
    )
