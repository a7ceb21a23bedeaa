"""``attach``: put one adapter method on a decoder's target projections, in place.

Methods: ``full`` (every parameter trains; float32 storage only), ``lora``, ``rslora``,
``lora_fa``, ``dora`` and ``tinylora``. The arguments are kept on the model as an
``AdapterSpec`` (``model.assay_adapter_spec``) so that saving and export know what was built.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from assay.adapters.base import AdapterLinear
from assay.adapters.dora import DoRALinear
from assay.adapters.inject import layer_indices, resolve, target_names
from assay.adapters.lora import LORA_METHODS, LoRALinear
from assay.adapters.tinylora import SHARINGS, TinyLoRALinear
from assay.errors import ConfigError
from assay.faultpoints import armed, declare

NO_SHARING = declare(
    "adapters.attach.tinylora_not_shared",
    "tinylora sharing=global gives every target its own vector",
)

METHODS = ("full", *LORA_METHODS, "dora", "tinylora")
_OPTIONS = {"tinylora": ("u", "r", "sharing")}


@dataclass(frozen=True)
class AdapterSpec:
    """What ``attach`` was asked for, resolved (target names, layer indices) and printable."""

    method: str
    rank: int
    alpha: float
    targets: tuple[str, ...]
    layers: tuple[int, ...]
    seed: int
    options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["targets"], out["layers"] = list(self.targets), list(self.layers)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AdapterSpec:
        return cls(
            method=data["method"],
            rank=int(data["rank"]),
            alpha=float(data["alpha"]),
            targets=tuple(data["targets"]),
            layers=tuple(int(i) for i in data["layers"]),
            seed=int(data["seed"]),
            options=dict(data.get("options") or {}),
        )


def adapter_modules(model: nn.Module) -> list[tuple[str, AdapterLinear]]:
    """(qualified name, adapter) for every adapter in ``model``, in module order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, AdapterLinear)]


def _has_stored_weights(model: nn.Module) -> bool:
    return any(getattr(m, "assay_storage", False) for m in model.modules())


def attach(
    model: nn.Module,
    method: str = "lora",
    *,
    rank: int = 8,
    alpha: float = 16,
    targets: str | Sequence[str] = "attention",
    layers: Iterable[int] | None = None,
    seed: int = 0,
    **options: Any,
) -> nn.Module:
    """Attach ``method`` to ``model`` in place and return it.

    Guarantees: base parameters stay frozen (except for ``full``, which unfreezes all of
    them); a fresh adapter is an exact no-op on the logits (DoRA: up to m / ||W|| == 1, which
    holds exactly in IEEE arithmetic); the same arguments give bitwise the same adapter. For
    ``tinylora``, ``options`` are ``u`` (default 13), ``r`` (default ``rank``) and ``sharing``
    ("global", the default, or "per_target").
    """
    if method not in METHODS:
        raise ConfigError(f"method {method!r} is unknown; expected one of {', '.join(METHODS)}")
    if getattr(model, "assay_adapter_spec", None) is not None:
        raise ConfigError("model already has adapters attached; load a fresh model")
    allowed = _OPTIONS.get(method, ())
    extra = sorted(set(options) - set(allowed))
    if extra:
        raise ConfigError(f"method {method!r} takes no option(s) {extra}; allowed: {list(allowed)}")
    if method == "full":
        if _has_stored_weights(model):
            raise ConfigError(
                "method 'full' needs storage float32 (every weight trains); this model holds "
                "bf16/NF4-stored weights"
            )
        model.requires_grad_(True)
        names = target_names("all-linear")
        spec = AdapterSpec("full", 0, 0.0, names, layer_indices(len(model.layers), None), seed)
        model.assay_adapter_spec = spec
        return model
    generator = torch.Generator().manual_seed(seed)
    sites = resolve(model, targets, layers)
    if method == "tinylora":
        options = {"u": 13, "r": rank, "sharing": "global", **options}
        if options["sharing"] not in SHARINGS:
            raise ConfigError(f"tinylora sharing {options['sharing']!r}; expected {SHARINGS}")
    shared = None
    if method == "tinylora" and options["sharing"] == "global" and not armed(NO_SHARING):
        shared = nn.Parameter(torch.zeros(int(options["u"])))
    for _, parent, attr in sites:
        base = getattr(parent, attr)
        if isinstance(base, AdapterLinear):
            raise ConfigError(f"{attr} already wraps an adapter")
        if method == "dora":
            adapter: AdapterLinear = DoRALinear(base, rank=rank, alpha=alpha, generator=generator)
        elif method == "tinylora":
            adapter = TinyLoRALinear(
                base, u=options["u"], r=options["r"], vector=shared, generator=generator
            )
        else:
            adapter = LoRALinear(base, method=method, rank=rank, alpha=alpha, generator=generator)
        setattr(parent, attr, adapter)
    model.assay_adapter_spec = AdapterSpec(
        method=method,
        rank=rank,
        alpha=float(alpha),
        targets=target_names(targets),
        layers=layer_indices(len(model.layers), layers),
        seed=seed,
        options=dict(options),
    )
    return model
