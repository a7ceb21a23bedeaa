"""assay.adapters: full, LoRA, rsLoRA, LoRA-FA, DoRA and TinyLoRA around frozen projections.

``attach(model, method=..., targets="attention", layers=None, seed=0, **options)`` wraps the
target projections in place; ``assay.adapters.registry`` holds every method's options and
defaults. ``disable``/``enable``/``disabled`` bypass every adapter (the DPO reference),
``merge``/``unmerge`` fold them into float32 weights, and ``save_adapter``/``load_adapter`` use
PEFT's format (TinyLoRA: its own).

Names load lazily, so ``assay.adapters.registry`` (no torch) can be imported by the CLI and
the config parser without importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "METHODS": "assay.adapters.attach",
    "AdapterSpec": "assay.adapters.attach",
    "adapter_modules": "assay.adapters.attach",
    "attach": "assay.adapters.attach",
    "AdapterLinear": "assay.adapters.base",
    "dense_weight": "assay.adapters.base",
    "disable": "assay.adapters.control",
    "disabled": "assay.adapters.control",
    "enable": "assay.adapters.control",
    "merge": "assay.adapters.control",
    "unmerge": "assay.adapters.control",
    "DoRALinear": "assay.adapters.dora",
    "load_adapter": "assay.adapters.io",
    "save_adapter": "assay.adapters.io",
    "LoRALinear": "assay.adapters.lora",
    "lora_scaling": "assay.adapters.lora",
    "TinyLoRALinear": "assay.adapters.tinylora",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'assay.adapters' has no attribute {name!r}")
