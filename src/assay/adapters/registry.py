"""The adapter registry: every method's name, options (with their one default) and constraints.

This is the single home of what a method is. ``attach``, the train-config parser, PEFT I/O,
the CLI help and the train-config schema's enums all read it, and a test fails when the shipped
schema, these dataclasses and the Python API disagree. It imports no torch, so config checking
and planning run without it.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from dataclasses import dataclass
from typing import Any

from assay.errors import ConfigError

SHARINGS = ("global", "per_target")


# The largest adapter scale accepted: about the square root of float32's largest value, since
# the scaled update is squared by the next layer's norm; a PEFT default is 2.
SCALE_CEILING = 2.0**64


@dataclass(frozen=True)
class NoOptions:
    """A method with no options of its own (``full``)."""


@dataclass(frozen=True)
class LoRAOptions:
    """LoRA-family options, as PEFT's ``LoraConfig`` names them (``r``, ``lora_alpha``,
    ``lora_dropout``). ``dropout`` is applied to the adapter's input only while training."""

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0


@dataclass(frozen=True)
class LoRAPlusOptions(LoRAOptions):
    """LoRA+ (Hayou et al., 2024): LoRA whose B factor learns ``lr_ratio`` times faster than
    A (PEFT's ``create_loraplus_optimizer``, ``loraplus_lr_ratio``)."""

    lr_ratio: float = 16.0


@dataclass(frozen=True)
class TinyLoRAOptions:
    """TinyLoRA: ``u`` trainable scalars per sharing group over a rank-``r`` truncated SVD.
    With ``global`` sharing the whole model trains exactly ``u`` numbers (13, as the paper's
    title has it)."""

    u: int = 13
    r: int = 2
    sharing: str = "global"


@dataclass(frozen=True)
class Method:
    """One adapter method: what it trains and how, as every entry point asks it (attach, the
    config parser, saving, PEFT I/O and the memory predictor compare no method names)."""

    name: str
    summary: str
    options: type
    #: the folder format it saves as: "peft" (HF PEFT), "assay" (assay's own), None (nothing:
    #: ``full`` exports a merged model instead); FILE_FORMATS names the module that writes it
    saved_as: str | None = "peft"
    #: the base weights themselves train (no adapter), so the base must keep its parameters
    trains_base: bool = False
    #: the update is scaled by alpha/sqrt(r) (rsLoRA) instead of alpha/r
    scale_root: bool = False
    #: the adapter's first factor trains (LoRA-FA freezes A; TinyLoRA's V^T basis is fixed);
    #: a frozen first factor needs no copy of its input for a gradient
    first_factor_trains: bool = True
    #: a learned per-row magnitude rescales the adapted weight (DoRA)
    magnitude: bool = False
    #: ``u`` trainable scalars over a frozen truncated-SVD basis (TinyLoRA)
    svd_basis: bool = False
    #: the ``AdapterLinear`` class that implements it, as ``"module:Class"`` (imported only
    #: when a model is adapted, so the registry needs no torch); None for ``full``
    implementation: str | None = None

    @property
    def scaled(self) -> bool:
        """Its update is scaled by ``alpha`` over the rank (the LoRA family's options)."""
        return any(f.name == "alpha" for f in dataclasses.fields(self.options))

    def scale(self, rank: int, alpha: float) -> float:
        """The factor its update is multiplied by: alpha / sqrt(r) for a ``scale_root``
        method (PEFT's ``use_rslora`` rule), alpha / r otherwise."""
        return alpha / math.sqrt(rank) if self.scale_root else alpha / rank

    def scale_problem(self, rank: int, alpha: float) -> str | None:
        """None when ``alpha`` and ``rank`` give a scale in (0, :data:`SCALE_CEILING`]; else
        one line saying what they give (each may be in range while their quotient is not)."""
        if not self.scaled or rank < 1:
            return None
        value = self.scale(rank, alpha)
        if 0 < value <= SCALE_CEILING:
            return None
        root = "sqrt(rank)" if self.scale_root else "rank"
        return (
            f"the adapter's scale (alpha / {root}) is {value:g} for alpha {alpha:g} and rank "
            f"{rank}, outside (0, {SCALE_CEILING:g}]"
        )

    def adapter_class(self) -> type:
        """The implementing class, imported now."""
        if self.implementation is None:
            raise ConfigError(f"method {self.name!r} wraps no projection")
        module, _, name = self.implementation.partition(":")
        return getattr(importlib.import_module(module), name)

    @property
    def peft(self) -> bool:
        """Saved in HF PEFT's folder format."""
        return self.saved_as == "peft"

    def peft_flags(self) -> dict[str, bool]:
        """The ``adapter_config.json`` switches that select this method in PEFT (LoRA-FA has
        none of its own: PEFT stores it as LoRA)."""
        return {"use_rslora": self.scale_root, "use_dora": self.magnitude}


LORA = "assay.adapters.lora:LoRALinear"
# Each folder format's module: it defines CONFIG (the file that marks such a folder),
# save(model, out) -> Path and load(model, folder) -> model.
FILE_FORMATS = {"assay": "assay.adapters.tinylora_io", "peft": "assay.adapters.peft_io"}
METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            "full",
            "every weight trains (float32 storage)",
            NoOptions,
            saved_as=None,
            trains_base=True,
        ),
        Method("lora", "y = Wx + (alpha/r) B A x", LoRAOptions, implementation=LORA),
        Method(
            "rslora",
            "LoRA scaled by alpha/sqrt(r)",
            LoRAOptions,
            scale_root=True,
            implementation=LORA,
        ),
        Method(
            "lora_fa",
            "LoRA with A frozen at its init; only B trains",
            LoRAOptions,
            first_factor_trains=False,
            implementation=LORA,
        ),
        Method(
            "loraplus",
            "LoRA whose B learns lr_ratio times faster than A (LoRA+)",
            LoRAPlusOptions,
            implementation="assay.adapters.loraplus:LoRAPlusLinear",
        ),
        Method(
            "dora",
            "LoRA plus a learned per-row magnitude",
            LoRAOptions,
            magnitude=True,
            implementation="assay.adapters.dora:DoRALinear",
        ),
        Method(
            "tinylora",
            "u scalars over a fixed SVD basis",
            TinyLoRAOptions,
            saved_as="assay",
            first_factor_trains=False,
            svd_basis=True,
            implementation="assay.adapters.tinylora:TinyLoRALinear",
        ),
    )
}
NAMES: tuple[str, ...] = tuple(METHODS)
LORA_FAMILY: tuple[str, ...] = tuple(
    n for n, m in METHODS.items() if issubclass(m.options, LoRAOptions)
)
PEFT_METHODS: tuple[str, ...] = tuple(n for n, m in METHODS.items() if m.peft)


def method(name: str) -> Method:
    """The registered method ``name``; ConfigError listing every known name otherwise."""
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        known = ", ".join(NAMES)
        raise ConfigError(f"method {name!r} is unknown; expected one of {known}") from None


def from_peft_flags(flags: dict[str, Any]) -> str:
    """The method a PEFT ``adapter_config.json`` with these ``use_*`` switches holds (a LoRA
    whose A trains: PEFT has no LoRA-FA of its own)."""
    wanted = {k: bool(flags.get(k)) for k in ("use_rslora", "use_dora")}
    return next(
        m.name
        for m in METHODS.values()
        if m.peft and m.first_factor_trains and m.peft_flags() == wanted
    )


def option_names(name: str) -> tuple[str, ...]:
    """The option fields method ``name`` takes, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(method(name).options))


def defaults(name: str) -> dict[str, Any]:
    """Method ``name``'s options with every default filled."""
    return dataclasses.asdict(method(name).options())


def build_options(name: str, given: dict[str, Any], *, where: str = "") -> Any:
    """The options dataclass of ``name`` from ``given`` (None values mean "the default").

    Raises ConfigError naming ``where`` for an option the method does not take. The values'
    bounds are the setting rules' (``assay.settings.training.check_adapter_options``).
    """
    prefix = f"{where}: " if where else ""
    allowed = option_names(name)
    extra = sorted(set(given) - set(allowed))
    if extra:
        raise ConfigError(
            f"{prefix}method {name!r} takes no option(s) {extra}; allowed: {list(allowed)}"
        )
    return method(name).options(**{k: v for k, v in given.items() if v is not None})


def help_text() -> str:
    """One line per method for CLI help: name, summary and options with defaults."""
    lines = []
    for name, entry in METHODS.items():
        opts = ", ".join(f"{k}={v}" for k, v in defaults(name).items()) or "no options"
        lines.append(f"{name}: {entry.summary} ({opts})")
    return "; ".join(lines)
