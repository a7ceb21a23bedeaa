"""Model-level switches: disable / enable (and a context manager), merge / unmerge.

``disabled(model)`` is how the DPO reference policy is computed: the same weights with every
adapter bypassed, so no second copy of the model exists.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn

from assay.adapters.attachment import adapter_modules
from assay.errors import ConfigError
from assay.settings.methods import method as registered


def _adapters(model: nn.Module, action: str):
    spec = getattr(model, "assay_adapter_spec", None)
    if spec is not None and registered(spec.method).trains_base:
        raise ConfigError(
            f"cannot {action} method {spec.method!r}: the base weights themselves train, so "
            "there is no separate base to fall back to; keep a frozen reference model instead"
        )
    found = [module for _, module in adapter_modules(model)]
    if not found:
        raise ConfigError(f"cannot {action}: the model has no adapters attached")
    return found


def disable(model: nn.Module) -> None:
    """Every adapter passes its input to the base layer alone; logits equal the base model's."""
    for adapter in _adapters(model, "disable"):
        adapter.disable()


def enable(model: nn.Module) -> None:
    """Undo ``disable``."""
    for adapter in _adapters(model, "enable"):
        adapter.enable()


@contextlib.contextmanager
def disabled(model: nn.Module) -> Iterator[nn.Module]:
    """``with disabled(model):`` runs the base model; the previous states come back after."""
    adapters = _adapters(model, "disable")
    states = [a.enabled for a in adapters]
    try:
        for adapter in adapters:
            adapter.disable()
        yield model
    finally:
        for adapter, state in zip(adapters, states, strict=True):
            adapter.enabled = state


def merge(model: nn.Module) -> None:
    """Fold every adapter into its float32 base weight (ConfigError for other storage)."""
    adapters = _adapters(model, "merge")
    for adapter in adapters:  # check every base first: never leave a half-merged model
        adapter._float_base()
    for adapter in adapters:
        adapter.merge()


def unmerge(model: nn.Module) -> None:
    """Undo ``merge`` (within fp32 rounding)."""
    for adapter in _adapters(model, "unmerge"):
        adapter.unmerge()
