"""Numbers formed from several settings, checked where they are formed.

Each setting is checked against its own range when it is read, but a product of settings in
range can still leave it: ``optim.lr: 1e10`` and ``adapter.lr_ratio: 1e300`` give LoRA+'s B an
infinite learning rate, which used to surface as a traceback at the first checkpoint. Every
number the optimizer applies to fp32 parameters (the learning rate of each group, and each
group's decoupled decay factor, its rate ``x weight_decay``) must be a finite float32; every
count formed from settings (rows per step, rows a run reads) must be an exact integer in
float64, since it is logged and compared as JSON. :func:`check_derived` refuses, naming the
last setting of the product and the product itself, before anything is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.errors import ConfigError
from assay.settings.methods import SCALE_CEILING
from assay.settings.methods import method as registered

FLOAT32_MAX = 3.4028234663852886e38
EXACT_INTEGER = 2**53 - 1  # the largest integer below 2^53: float64 (JSON) holds up to it exactly


# The rules of :func:`derived_numbers`, for docs/settings.md.
DOC_NOTES = (
    "",
    "## Numbers formed from several settings",
    "",
    "Each setting is checked against its own range, and so is every number the run forms from",
    "several of them, before anything loads (one line naming the last setting of the product):",
    "",
    "- the learning rate, `optim.lr x optim.weight_decay` and, for LoRA+, B's learning rate",
    "  `optim.lr x adapter.lr_ratio` and its decay `x optim.weight_decay` must be finite",
    "  float32 values (at most 3.4e38), since the optimizer applies them to float32",
    "  parameters;",
    "- the adapter's scale `adapter.alpha / adapter.rank` (`/ sqrt(adapter.rank)` for",
    "  rsLoRA) must be at most 2^64 (about 1.8e19, the square root of float32's largest",
    "  value: the next layer's norm squares the scaled update);",
    "- rows per step `batch.micro_batch x batch.grad_accum` and the rows a run reads",
    "  (`steps` x rows per step) must stay below 2^53, the integers JSON numbers hold exactly.",
)


@dataclass(frozen=True)
class Derived:
    """One number formed from settings: what it is, the setting named when it is out of
    range, its value and its ceiling."""

    what: str
    field: str
    value: float
    ceiling: float


def derived_numbers(config: Any) -> list[Derived]:
    """Every number the run forms from two or more settings of ``config`` (a TrainConfig)."""
    lr, optim, batch = config.optim.lr, config.optim, config.batch
    found = [
        Derived(
            "the decay per step (optim.lr x optim.weight_decay)",
            "optim.weight_decay",
            lr * optim.weight_decay,
            FLOAT32_MAX,
        ),
        Derived("the learning rate (optim.lr)", "optim.lr", lr, FLOAT32_MAX),
    ]
    options = config.adapter.options()
    method = registered(config.adapter.method)
    for param, option in method.factor_learning_rates:
        name, ratio = param.removeprefix("lora_"), options[option]
        found.append(
            Derived(
                f"{name}'s learning rate (optim.lr x adapter.{option})",
                f"adapter.{option}",
                lr * ratio,
                FLOAT32_MAX,
            )
        )
        found.append(
            Derived(
                f"{name}'s decay per step (optim.lr x adapter.{option} x optim.weight_decay)",
                f"adapter.{option}",
                lr * ratio * optim.weight_decay,
                FLOAT32_MAX,
            )
        )
    if method.scaled:
        root = "sqrt(adapter.rank)" if method.scale_root else "adapter.rank"
        found.append(
            Derived(
                f"the adapter's scale (adapter.alpha / {root})",
                "adapter.alpha",
                method.scale(options["rank"], options["alpha"]),
                SCALE_CEILING,
            )
        )
    rows = batch.micro_batch * batch.grad_accum
    found.append(
        Derived(
            "rows per step (batch.micro_batch x batch.grad_accum)",
            "batch.grad_accum",
            rows,
            EXACT_INTEGER,
        )
    )
    found.append(
        Derived(
            "rows the run reads (steps x rows per step)",
            "steps",
            config.steps * rows,
            EXACT_INTEGER,
        )
    )
    return found


def _shown(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def check_derived(config: Any) -> None:
    """ConfigError (one line: the config, the setting, the product and its ceiling) when a
    number formed from settings is not finite or exceeds its ceiling."""
    source = Path(config.source)
    for number in derived_numbers(config):
        value = number.value
        if not (abs(value) <= number.ceiling):  # also refuses NaN and infinity
            raise ConfigError(
                f"{source}: {number.field}: {number.what} is {_shown(value)}, over the largest "
                f"allowed, {_shown(number.ceiling)}; lower one of the settings that form it"
            )
