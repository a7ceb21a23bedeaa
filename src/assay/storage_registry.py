"""The storage registry: every way of holding the frozen base, and what each one means.

Code that must treat storages differently asks an entry (``keeps_parameters``, ``quantized``,
``element_bytes``, ``double_quant``) rather than comparing names; the settings tree, the CLI's
``--storage`` choices, ``assay.storage.apply`` and the memory predictor all read it. It imports
no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from assay.errors import ConfigError


@dataclass(frozen=True)
class Storage:
    """One frozen-base storage. ``element_bytes`` is a float store's bytes per weight (None
    for NF4 codes, which pack two weights per byte with a scale per block of 64)."""

    name: str
    summary: str
    element_bytes: int | None
    double_quant: bool = False

    @property
    def quantized(self) -> bool:
        """NF4 codes (bitsandbytes layout) rather than floats."""
        return self.element_bytes is None

    @property
    def keeps_parameters(self) -> bool:
        """The base stays as the loaded fp32 ``nn.Linear`` parameters: nothing is converted,
        and only this storage can train the base weights themselves (method ``full``)."""
        return self.element_bytes == 4


STORAGE_ENTRIES: dict[str, Storage] = {
    s.name: s
    for s in (
        Storage("float32", "the loaded fp32 weights, unchanged", 4),
        Storage("bf16", "bfloat16 copies, decoded to the compute dtype per tile", 2),
        Storage("nf4", "4-bit NormalFloat codes, one fp32 absmax per 64 weights", None),
        Storage(
            "nf4_double_quant",
            "NF4 with the absmax values themselves quantized to 8 bits per block of 256",
            None,
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
