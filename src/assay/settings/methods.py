"""The adapter methods: every method's name, what it trains, and its options, each declared once.

This is the single home of what a method is. Each option is a field of its method's options
dataclass carrying its setting rule (help, default, bounds), so the train config's ``adapter``
section (``assay.settings.training.AdapterConfig``), the checks on options given from Python,
the JSON Schema, the docs' settings table and the CLI help all derive from one declaration.
``attach``, PEFT I/O, the optimizer and the memory predictor ask an entry (``scaled``,
``trains_base``, ``magnitude``, ``factor_learning_rates``, ...) rather than comparing names. It
imports no torch, so config checking and planning run without it.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from assay.errors import ConfigError
from assay.settings.rule import setting

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

    #: how the settings docs name the methods that take these options
    family: ClassVar[str] = "lora family"

    rank: int = setting("Adapter rank r.", "integer", 8, minimum=1)
    alpha: float = setting(
        "Scale numerator: alpha/rank, or alpha/sqrt(rank) for rslora.",
        "number",
        16.0,
        exclusive_minimum=0,
    )
    dropout: float = setting(
        "PEFT's lora_dropout: inverted dropout on the adapter input while training (the base "
        "path never sees it); 0 is off.",
        "number",
        0.0,
        minimum=0,
        exclusive_maximum=1,
    )


@dataclass(frozen=True)
class LoRAPlusOptions(LoRAOptions):
    """LoRA+ (Hayou et al., 2024): LoRA whose B factor learns ``lr_ratio`` times faster than
    A (PEFT's ``create_loraplus_optimizer``, ``loraplus_lr_ratio``)."""

    lr_ratio: float = setting(
        "LoRA+: B's learning rate over A's (PEFT's loraplus_lr_ratio).",
        "number",
        16.0,
        exclusive_minimum=0,
    )


@dataclass(frozen=True)
class TinyLoRAOptions:
    """TinyLoRA: ``u`` trainable scalars per sharing group over a rank-``r`` truncated SVD.
    With ``global`` sharing the whole model trains exactly ``u`` numbers (13, as the paper's
    title has it)."""

    u: int = setting(
        "Length of the trainable vector v per sharing group (with global sharing, the whole "
        "model trains this many numbers).",
        "integer",
        13,
        minimum=1,
    )
    r: int = setting("Rank of the truncated SVD of each frozen weight.", "integer", 2, minimum=1)
    sharing: str = setting(
        "global (one v for all targets) or per_target.", "string", "global", choices=SHARINGS
    )


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
    #: (adapter parameter, option): that parameter of every adapter trains at the option's
    #: value times the run's learning rate, in an optimizer group of its own (LoRA+'s B)
    factor_learning_rates: tuple[tuple[str, str], ...] = ()

    def learning_rate_scales(self, options: dict[str, Any]) -> dict[str, float]:
        """Adapter parameter name -> multiple of the run's learning rate it trains at, under
        the method's ``options`` (an option not given takes its default); a parameter not
        named trains at the run's rate."""
        resolved = self.options(**options)
        return {
            param: float(getattr(resolved, option)) for param, option in self.factor_learning_rates
        }

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
            implementation=LORA,
            factor_learning_rates=(("lora_B", "lr_ratio"),),
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

    Raises ConfigError naming ``where`` for an option the method does not take, or the first
    option that breaks its setting rule.
    """
    prefix = f"{where}: " if where else ""
    allowed = option_names(name)
    extra = sorted(set(given) - set(allowed))
    if extra:
        raise ConfigError(
            f"{prefix}method {name!r} takes no option(s) {extra}; allowed: {list(allowed)}"
        )
    options = method(name).options(**{k: v for k, v in given.items() if v is not None})
    for field in dataclasses.fields(options):
        problem = field.metadata["rule"].violation(getattr(options, field.name))
        if problem:
            raise ConfigError(f"{prefix}{field.name} {problem}")
    return options


def help_text() -> str:
    """One line per method for CLI help: name, summary and options with defaults."""
    lines = []
    for name, entry in METHODS.items():
        opts = ", ".join(f"{k}={v}" for k, v in defaults(name).items()) or "no options"
        lines.append(f"{name}: {entry.summary} ({opts})")
    return "; ".join(lines)
