"""The storage registry: every way of holding the frozen base, and what each one means.

Code that must treat storages differently asks an entry (``store``, ``keeps_parameters``,
``quantized``, ``element_bytes``, ``double_quant``) rather than comparing names; the settings
tree, the CLI's ``--storage`` choices, ``assay.storage.apply`` (which builds each entry's
store) and the memory predictor all read it. A new storage is its store module and one entry
here. It imports no torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from assay.errors import ConfigError


@dataclass(frozen=True)
class Storage:
    """One frozen-base storage: how a weight is held, which class holds it, and the facts the
    memory predictor sizes it by."""

    name: str
    summary: str
    #: bytes per weight of a float store (4, 2); a quantized store's codes are sized by
    #: ``code_bits`` and ``block`` instead
    element_bytes: int | None
    #: the weight store class, as ``"module:Class"`` (imported when a model is converted);
    #: None keeps the loaded fp32 ``nn.Linear`` parameters
    store: str | None = None
    #: keyword arguments of the store's constructor besides the weight
    store_options: tuple[tuple[str, Any], ...] = ()
    #: quantized codes: bits per weight, and weights per absmax scale (NF4: 4 and 64)
    code_bits: int | None = None
    block: int | None = None
    double_quant: bool = False

    @property
    def quantized(self) -> bool:
        """Codes with per-block scales rather than floats."""
        return self.code_bits is not None

    @property
    def keeps_parameters(self) -> bool:
        """The base stays as the loaded fp32 ``nn.Linear`` parameters: nothing is converted,
        and only this storage can train the base weights themselves (method ``full``)."""
        return self.store is None

    def store_class(self) -> type:
        """The weight store class, imported now."""
        if self.store is None:
            raise ConfigError(f"storage {self.name!r} converts nothing")
        module, _, name = self.store.partition(":")
        return getattr(importlib.import_module(module), name)


NF4 = "assay.storage.nf4:NF4Weight"
STORAGE_ENTRIES: dict[str, Storage] = {
    s.name: s
    for s in (
        Storage("float32", "the loaded fp32 weights, unchanged", 4),
        Storage(
            "bf16",
            "bfloat16 copies, decoded to the compute dtype per tile",
            2,
            store="assay.storage.dense:DenseWeight",
            store_options=(("dtype", "bfloat16"),),
        ),
        Storage(
            "nf4",
            "4-bit NormalFloat codes, one fp32 absmax per 64 weights",
            None,
            store=NF4,
            store_options=(("double_quant", False),),
            code_bits=4,
            block=64,
        ),
        Storage(
            "nf4_double_quant",
            "NF4 with the absmax values themselves quantized to 8 bits per block of 256",
            None,
            store=NF4,
            store_options=(("double_quant", True),),
            code_bits=4,
            block=64,
            double_quant=True,
        ),
    )
}
STORAGES: tuple[str, ...] = tuple(STORAGE_ENTRIES)


def storage(name: str) -> Storage:
    """The registered storage ``name``; ConfigError listing every known name otherwise."""
    try:
        return STORAGE_ENTRIES[name]
    except (KeyError, TypeError):
        raise ConfigError(
            f"unknown storage {name!r}; expected one of {', '.join(STORAGES)}"
        ) from None
