"""Address a module's parameters and buffers by dotted name (``layers.0.mlp.up_proj.weight``)."""

from __future__ import annotations

import torch
from torch import nn


def _owner(module: nn.Module, dotted: str) -> tuple[nn.Module, str]:
    owner_name, _, attr = dotted.rpartition(".")
    return (module.get_submodule(owner_name) if owner_name else module), attr


def get_tensor(module: nn.Module, dotted: str) -> torch.Tensor:
    """The parameter or buffer at ``dotted``."""
    owner, attr = _owner(module, dotted)
    return getattr(owner, attr)


def set_tensor(module: nn.Module, dotted: str, value: torch.Tensor) -> None:
    """Replace the parameter or buffer at ``dotted`` with ``value``; a parameter stays a
    parameter (``requires_grad`` taken from ``value``), a buffer stays a buffer."""
    owner, attr = _owner(module, dotted)
    if attr in owner._parameters:
        owner._parameters[attr] = nn.Parameter(value, requires_grad=value.requires_grad)
    else:
        owner._buffers[attr] = value
