"""assay.adapters: full, LoRA, rsLoRA, LoRA-FA, DoRA and TinyLoRA around frozen projections.

``attach(model, method=..., targets="attention", layers=None, seed=0, **options)`` wraps the
target projections in place; ``assay.settings.methods`` (no torch) holds every method's
options, defaults and constraints. ``disable``/``enable``/``disabled`` bypass every adapter
(the DPO reference), ``merge``/``unmerge`` fold them into float32 weights, and
``save_adapter``/``load_adapter`` use PEFT's format (TinyLoRA: its own).
"""

from __future__ import annotations

from assay.lazy import lazy_attributes

# Imported on first use, so that importing the package loads no torch.
_LAZY = {
    "AdapterLinear": "assay.adapters.base",
    "AdapterSpec": "assay.adapters.attachment",
    "DoRALinear": "assay.adapters.dora",
    "LoRALinear": "assay.adapters.lora",
    "METHODS": "assay.adapters.attachment",
    "TinyLoRALinear": "assay.adapters.tinylora",
    "adapter_modules": "assay.adapters.attachment",
    "attach": "assay.adapters.attachment",
    "dense_weight": "assay.adapters.base",
    "disable": "assay.adapters.control",
    "disabled": "assay.adapters.control",
    "enable": "assay.adapters.control",
    "load_adapter": "assay.adapters.io",
    "lora_scaling": "assay.adapters.lora",
    "merge": "assay.adapters.control",
    "save_adapter": "assay.adapters.io",
    "unmerge": "assay.adapters.control",
}

__all__ = sorted(_LAZY)
__getattr__ = lazy_attributes(__name__, _LAZY)
