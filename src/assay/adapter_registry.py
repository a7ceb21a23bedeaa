"""The adapter registry: every method's name, options (with their one default) and constraints.

This is the single home of what a method is. ``attach``, the train-config parser, PEFT I/O,
the CLI help and the train-config schema's enums all read it, and a test fails when the shipped
schema, these dataclasses and the Python API disagree. It imports no torch, so config checking
and planning run without it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from assay.errors import ConfigError

SHARINGS = ("global", "per_target")


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
class TinyLoRAOptions:
    """TinyLoRA: ``u`` trainable scalars per sharing group over a rank-``r`` truncated SVD.
    With ``global`` sharing the whole model trains exactly ``u`` numbers (13, as the paper's
    title has it)."""

    u: int = 13
    r: int = 2
    sharing: str = "global"


@dataclass(frozen=True)
class Method:
    """One adapter method and the rules every entry point applies to it."""

    name: str
    summary: str
    options: type
    #: saved in HF PEFT's folder format (else assay's own, or nothing for ``full``)
    peft: bool = False
    #: every target weight itself trains, so the frozen base must be float32
    needs_float_storage: bool = False
    #: a streamed run must recompute each layer in backward (trainable base weights)
    stream_needs_recompute: bool = False


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            "full",
            "every weight trains (float32 storage)",
            NoOptions,
            needs_float_storage=True,
            stream_needs_recompute=True,
        ),
        Method("lora", "y = Wx + (alpha/r) B A x", LoRAOptions, peft=True),
        Method("rslora", "LoRA scaled by alpha/sqrt(r)", LoRAOptions, peft=True),
        Method("lora_fa", "LoRA with A frozen at its init; only B trains", LoRAOptions, peft=True),
        Method("dora", "LoRA plus a learned per-row magnitude", LoRAOptions, peft=True),
        Method("tinylora", "u scalars over a fixed SVD basis", TinyLoRAOptions),
    )
}
NAMES: tuple[str, ...] = tuple(METHODS)
LORA_FAMILY: tuple[str, ...] = tuple(n for n, m in METHODS.items() if m.options is LoRAOptions)
PEFT_METHODS: tuple[str, ...] = tuple(n for n, m in METHODS.items() if m.peft)


def method(name: str) -> Method:
    """The registered method ``name``; ConfigError listing every known name otherwise."""
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        known = ", ".join(NAMES)
        raise ConfigError(f"method {name!r} is unknown; expected one of {known}") from None


def option_names(name: str) -> tuple[str, ...]:
    """The option fields method ``name`` takes, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(method(name).options))


def defaults(name: str) -> dict[str, Any]:
    """Method ``name``'s options with every default filled."""
    return dataclasses.asdict(method(name).options())


def build_options(name: str, given: dict[str, Any], *, where: str = "") -> Any:
    """The options dataclass of ``name`` from ``given`` (None values mean "the default").

    Raises ConfigError naming ``where`` for an option the method does not take, or a value
    outside the option's domain (positive sizes, dropout in [0, 1), a known sharing).
    """
    prefix = f"{where}: " if where else ""
    allowed = option_names(name)
    extra = sorted(set(given) - set(allowed))
    if extra:
        raise ConfigError(
            f"{prefix}method {name!r} takes no option(s) {extra}; allowed: {list(allowed)}"
        )
    options = method(name).options(**{k: v for k, v in given.items() if v is not None})
    _check(options, prefix)
    return options


def _check(options: Any, prefix: str) -> None:
    if isinstance(options, LoRAOptions):
        if not isinstance(options.rank, int) or isinstance(options.rank, bool) or options.rank < 1:
            raise ConfigError(f"{prefix}rank must be a positive integer, got {options.rank!r}")
        if not 0.0 <= float(options.dropout) < 1.0:
            raise ConfigError(f"{prefix}dropout must be in [0, 1), got {options.dropout!r}")
    if isinstance(options, TinyLoRAOptions):
        for key in ("u", "r"):
            value = getattr(options, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{prefix}{key} must be a positive integer, got {value!r}")
        if options.sharing not in SHARINGS:
            raise ConfigError(
                f"{prefix}tinylora sharing {options.sharing!r}; expected one of {SHARINGS}"
            )


def help_text() -> str:
    """One line per method for CLI help: name, summary and options with defaults."""
    lines = []
    for name, entry in METHODS.items():
        opts = ", ".join(f"{k}={v}" for k, v in defaults(name).items()) or "no options"
        lines.append(f"{name}: {entry.summary} ({opts})")
    return "; ".join(lines)
