"""``save_adapter`` / ``load_adapter``: the right on-disk format for each method.

lora, rslora, lora_fa and dora use PEFT's format (``peft_io``); tinylora uses its own
(``tinylora_io``); ``full`` has no adapter to save (use ``assay.adapters.export.export_merged``).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

from torch import nn

from assay.errors import ConfigError
from assay.settings.methods import FILE_FORMATS
from assay.settings.methods import method as registered


def _format(name: str) -> ModuleType:
    return importlib.import_module(FILE_FORMATS[name])


def save_adapter(model: nn.Module, out: str | os.PathLike[str]) -> Path:
    """Write the adapter of ``model`` to the folder ``out`` in its method's format; returns
    the folder."""
    spec = getattr(model, "assay_adapter_spec", None)
    if spec is None:
        raise ConfigError("the model has no adapter attached; nothing to save")
    saved_as = registered(spec.method).saved_as
    if saved_as is None:
        raise ConfigError(
            f"method {spec.method!r} has no separate adapter; export the merged model"
        )
    return _format(saved_as).save(model, out)


def marking_files() -> list[str]:
    """The file names that mark an adapter folder, one per format (PEFT's adapter_config.json
    among them)."""
    return sorted(_format(name).CONFIG for name in FILE_FORMATS)


def load_adapter(model: nn.Module, path: str | os.PathLike[str]) -> nn.Module:
    """Attach the adapter saved in folder ``path`` to a fresh ``model`` and return it: the
    format whose marking file the folder holds (assay's own is looked for first)."""
    folder = Path(path)
    formats = [_format(name) for name in FILE_FORMATS]
    for found in formats:
        if (folder / found.CONFIG).is_file():
            return found.load(model, folder)
    names = " or ".join(f.CONFIG for f in reversed(formats))
    raise ConfigError(f"{folder}: no {names}; not an adapter folder")
