"""Move adapters off their no-op init, reproducibly, so parity checks are not vacuous.

A fresh LoRA has B = 0 and a fresh TinyLoRA has v = 0: comparing two implementations there
would only compare base models. ``randomize_adapters`` draws B, v (and scales the DoRA
magnitude) from a seeded generator in module order.
"""

from __future__ import annotations

import torch
from torch import nn

from assay.adapters.attachment import adapter_modules


@torch.no_grad()
def randomize_adapters(model: nn.Module, seed: int = 0, std: float = 0.05) -> nn.Module:
    """B ~ N(0, std^2), v ~ N(0, (10 std)^2), magnitude *= 1 + N(0, std^2); returns ``model``."""
    generator = torch.Generator().manual_seed(seed)
    seen: set[int] = set()
    for _, adapter in adapter_modules(model):
        for name, param in adapter.named_parameters(recurse=False):
            if id(param) in seen:  # a globally shared TinyLoRA vector is drawn once
                continue
            seen.add(id(param))
            noise = torch.randn(param.shape, generator=generator)
            if name == "lora_B":
                param.copy_(noise * std)
            elif name == "tiny_v":
                param.copy_(noise * 10 * std)
            elif name == "lora_magnitude_vector":
                param.mul_(1 + std * noise)
    return model
