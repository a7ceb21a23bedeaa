"""LoRA, rsLoRA and LoRA-FA: y = base(x) + s * B(A drop(x)), with A: r x in and B: out x r.

Defaults follow HF PEFT: A is kaiming-uniform (a = sqrt 5), B is zero, so a fresh adapter is
an exact no-op. ``s`` is alpha / r for LoRA and LoRA-FA, alpha / sqrt(r) for rsLoRA. LoRA-FA
keeps A frozen at its random init; only B trains (its gradient needs only A x). ``drop`` is
PEFT's ``lora_dropout``: inverted dropout on the adapter's input (cast to the adapter's dtype
first, as PEFT does), active only while the module is training; the base path never sees it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from assay.adapters.base import AdapterLinear
from assay.errors import ConfigError
from assay.settings.methods import LORA_FAMILY, LoRAOptions
from assay.settings.methods import method as registered

if TYPE_CHECKING:
    from assay.storage.linear import FrozenLinear


def lora_scaling(method: str, rank: int, alpha: float) -> float:
    """alpha / sqrt(r) for a method the registry marks ``scale_root`` (rsLoRA), alpha / r
    otherwise (PEFT's ``use_rslora`` rule)."""
    return registered(method).scale(rank, alpha)


class LoRALinear(AdapterLinear):
    """One low-rank update around a frozen linear; ``lora_A`` [r, in], ``lora_B`` [out, r]."""

    def __init__(
        self,
        base: nn.Linear | FrozenLinear,
        *,
        method: str = "lora",
        rank: int = LoRAOptions.rank,
        alpha: float = LoRAOptions.alpha,
        dropout: float = LoRAOptions.dropout,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(base)
        if method not in LORA_FAMILY:
            raise ConfigError(f"method {method!r} is not a LoRA method; expected {LORA_FAMILY}")
        if not isinstance(rank, int) or rank <= 0:
            raise ConfigError(f"rank must be a positive integer, got {rank!r}")
        self.method = method
        self.rank = rank
        self.alpha = float(alpha)
        self.dropout = float(dropout)
        self.scaling = lora_scaling(method, rank, self.alpha)
        a = torch.empty(rank, self.in_features)
        nn.init.kaiming_uniform_(a, a=math.sqrt(5), generator=generator)
        self.lora_A = nn.Parameter(a, requires_grad=registered(method).first_factor_trains)
        self.lora_B = nn.Parameter(torch.zeros(self.out_features, rank))

    @classmethod
    def wrap(cls, base, *, method, options, generator, shared):
        return cls(
            base,
            method=method,
            generator=generator,
            rank=options["rank"],
            alpha=options["alpha"],
            dropout=options["dropout"],
        )

    def lora_output(self, x: torch.Tensor) -> torch.Tensor:
        """B(A x) without the scale, in the adapter's dtype."""
        return F.linear(F.linear(x.to(self.lora_A.dtype), self.lora_A), self.lora_B)

    def dropped(self, x: torch.Tensor) -> torch.Tensor:
        """The adapter's input: ``x`` in the adapter's dtype, dropped out while training."""
        x = x.to(self.lora_A.dtype)
        if self.dropout and self.training:
            return F.dropout(x, self.dropout, training=True)
        return x

    def adapted(self, x: torch.Tensor, base_out: torch.Tensor) -> torch.Tensor:
        update = self.lora_output(self.dropped(x)) * self.scaling
        return base_out + update.to(base_out.dtype)

    @torch.no_grad()
    def delta_weight(self) -> torch.Tensor:
        return (self.lora_B.float() @ self.lora_A.float()) * self.scaling

    def extra_repr(self) -> str:
        drop = f", dropout={self.dropout:g}" if self.dropout else ""
        scale = f"alpha={self.alpha:g}, s={self.scaling:g}"
        return f"method={self.method}, rank={self.rank}, {scale}{drop}"
