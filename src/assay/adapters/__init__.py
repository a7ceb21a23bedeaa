"""assay.adapters: full, LoRA, rsLoRA, LoRA-FA, DoRA and TinyLoRA around frozen projections.

``attach(model, method=..., targets="attention", layers=None, seed=0, **options)`` wraps the
target projections in place; ``assay.adapter_registry`` (no torch) holds every method's
options, defaults and constraints. ``disable``/``enable``/``disabled`` bypass every adapter
(the DPO reference), ``merge``/``unmerge`` fold them into float32 weights, and
``save_adapter``/``load_adapter`` use PEFT's format (TinyLoRA: its own).
"""

from assay.adapters.attach import METHODS, AdapterSpec, adapter_modules, attach
from assay.adapters.base import AdapterLinear, dense_weight
from assay.adapters.control import disable, disabled, enable, merge, unmerge
from assay.adapters.dora import DoRALinear
from assay.adapters.io import load_adapter, save_adapter
from assay.adapters.lora import LoRALinear, lora_scaling
from assay.adapters.tinylora import TinyLoRALinear

__all__ = [
    "METHODS",
    "AdapterLinear",
    "AdapterSpec",
    "DoRALinear",
    "LoRALinear",
    "TinyLoRALinear",
    "adapter_modules",
    "attach",
    "dense_weight",
    "disable",
    "disabled",
    "enable",
    "load_adapter",
    "lora_scaling",
    "merge",
    "save_adapter",
    "unmerge",
]
