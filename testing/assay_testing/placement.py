"""Where a gate's tensors were: the device type a claim reports with ``claim.ran_on``."""

from __future__ import annotations

import torch


def device_of(obj: torch.Tensor | torch.nn.Module) -> str:
    """The device type (``cpu``, ``cuda`` ...) of a tensor, or of a module's first parameter
    or buffer; ``cpu`` for a module that holds none."""
    if isinstance(obj, torch.Tensor):
        return obj.device.type
    for tensor in (*obj.parameters(), *obj.buffers()):
        return tensor.device.type
    return "cpu"
