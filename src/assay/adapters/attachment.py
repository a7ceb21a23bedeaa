"""``attach``: put one adapter method on a decoder's target projections, in place.

Methods: every entry of the method registry (``assay.settings.methods.NAMES``): ``full``
(every parameter trains; float32 storage only), ``lora``, ``rslora``, ``lora_fa``,
``loraplus``, ``dora`` and ``tinylora``. The arguments are kept on the model as an
``AdapterSpec`` (``model.assay_adapter_spec``) so that saving and export know what was built.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from assay.adapters.base import AdapterLinear
from assay.adapters.inject import PARENT, layer_indices, target_names
from assay.errors import ConfigError
from assay.settings.methods import NAMES, LoRAOptions, build_options
from assay.settings.methods import method as registered

if TYPE_CHECKING:
    from assay.model.decoder import Decoder

METHODS = NAMES


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

    def __post_init__(self) -> None:
        """ValueError when the spec's alpha and rank form a scale out of range, so a saved
        spec or an adapter folder is refused where its numbers are read, before any tensor
        is made."""
        if self.method in METHODS:
            problem = registered(self.method).scale_problem(self.rank, self.alpha)
            if problem:
                raise ValueError(problem)

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
    model: Decoder,
    method: str = "lora",
    *,
    rank: int | None = None,
    alpha: float | None = None,
    targets: str | Sequence[str] = "attention",
    layers: Iterable[int] | None = None,
    seed: int = 0,
    **options: Any,
) -> nn.Module:
    """Attach ``method`` to ``model`` in place and return it.

    Options and their defaults come from ``assay.settings.methods``: the LoRA family takes
    ``rank`` (8), ``alpha`` (16) and ``dropout`` (0, PEFT's ``lora_dropout``); ``tinylora``
    takes ``u`` (13), ``r`` (2) and ``sharing`` ("global" or "per_target"). ``rank`` and
    ``alpha`` are accepted by every method so one call shape serves all, and are ignored by
    ``full`` and ``tinylora``; any other option the method does not take is refused.

    Guarantees: base parameters stay frozen (except for ``full``, which unfreezes all of
    them); a fresh adapter is an exact no-op on the logits (DoRA: up to m / ||W|| == 1, which
    holds exactly in IEEE arithmetic); the same arguments give bitwise the same adapter.
    """
    entry = registered(method)
    if getattr(model, "assay_adapter_spec", None) is not None:
        raise ConfigError("model already has adapters attached; load a fresh model")
    resolved = _checked_options(method, rank, alpha, options)
    if entry.trains_base:
        if _has_stored_weights(model):
            raise ConfigError(
                "method 'full' needs storage float32 (every weight trains); this model holds "
                "bf16/NF4-stored weights"
            )
        model.requires_grad_(True)
        names = target_names("all-linear", fused=model.config.fused_projections)
        spec = AdapterSpec("full", 0, 0.0, names, layer_indices(len(model.layers), None), seed)
        model.assay_adapter_spec = spec
        return model
    fused = model.config.fused_projections
    adapt = LayerwiseAttach(len(model.layers), method, resolved, targets, layers, seed, fused)
    for index, layer in enumerate(model.layers):
        adapt(index, layer)
    adapt.finish(model)
    return model


def _checked_options(method: str, rank: int | None, alpha: float | None, options: dict) -> Any:
    if issubclass(registered(method).options, LoRAOptions):
        options = {"rank": rank, "alpha": alpha, **options}
    return build_options(method, options)


def layerwise_attach(
    num_layers: int,
    method: str = "lora",
    *,
    rank: int | None = None,
    alpha: float | None = None,
    targets: str | Sequence[str] = "attention",
    layers: Iterable[int] | None = None,
    seed: int = 0,
    fused: bool = False,
    **options: Any,
) -> LayerwiseAttach:
    """``attach``'s arguments, checked as ``attach`` checks them, as a per-layer attacher for
    a model of ``num_layers`` layers (``fused``: laid out as Phi-3, ``qkv_proj`` and
    ``gate_up_proj``). Method ``full`` trains the whole base and is refused."""
    if registered(method).trains_base:
        raise ConfigError(f"method {method!r} trains the base: it cannot be attached per layer")
    resolved = _checked_options(method, rank, alpha, options)
    return LayerwiseAttach(num_layers, method, resolved, targets, layers, seed, fused)


class LayerwiseAttach:
    """``attach`` one decoder layer at a time, for a loader that holds one layer at a time.

    Called with every layer in order, then ``finish(model)``, it builds bitwise the adapters
    ``attach`` builds: one seeded generator is drawn from in the same site order (layer, then
    projection). ``options`` are the method's checked options (``build_options``).
    """

    implementation: type[AdapterLinear]
    shared: dict[str, Any]

    def __init__(
        self,
        num_layers: int,
        method: str,
        options: Any,
        targets: str | Sequence[str],
        layers: Iterable[int] | None,
        seed: int,
        fused: bool = False,
    ) -> None:
        self.entry = registered(method)
        self.method, self.targets, self.seed = method, targets, seed
        self.options = asdict(options)
        self.layers = layer_indices(num_layers, layers)
        self.names = target_names(targets, fused)
        self.num_layers = num_layers
        self.generator = torch.Generator().manual_seed(seed)
        self.implementation, self.shared = self.entry.adapter_class(), {}
        self.seen = 0

    def __call__(self, index: int, layer: nn.Module) -> None:
        if index != self.seen:
            raise ConfigError(
                f"layers must be adapted in order: got layer {index}, expected {self.seen}"
            )
        self.seen += 1
        if index not in self.layers:
            return
        for projection in self.names:
            parent = getattr(layer, PARENT[projection])
            base = getattr(parent, projection)
            if isinstance(base, AdapterLinear):
                raise ConfigError(f"{projection} already wraps an adapter")
            adapter = self.implementation.wrap(
                base,
                method=self.method,
                options=self.options,
                generator=self.generator,
                shared=self.shared,
            )
            setattr(parent, projection, adapter)

    def finish(self, model: Decoder) -> None:
        """Record the ``AdapterSpec`` on ``model``, once every layer has been adapted."""
        if self.seen != self.num_layers:
            raise ConfigError(f"adapted {self.seen} of {self.num_layers} layers")
        options = dict(self.options)
        if issubclass(self.entry.options, LoRAOptions):
            # dropout is recorded only when on, so specs of dropout-free adapters stay as they were
            scale = {"rank": options.pop("rank"), "alpha": float(options.pop("alpha"))}
            options = {k: v for k, v in options.items() if v}
        else:
            scale = {"rank": 0, "alpha": 0.0}
        model.assay_adapter_spec = AdapterSpec(
            method=self.method,
            targets=self.names,
            layers=self.layers,
            seed=self.seed,
            options=options,
            **scale,
        )
