"""DoRA: W' = m * (W + sBA) / ||W + sBA||_row, the row norm detached from autograd.

The magnitude ``m`` starts at ||W||_row, so with B = 0 a fresh adapter is an exact no-op up
to the rounding of m / ||W||. The forward follows PEFT's arithmetic (base output rescaled, then
the scaled LoRA path added) so that the two agree to fp32 rounding; the bias is not rescaled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from assay.adapters.base import dense_weight
from assay.adapters.lora import LoRALinear
from assay.settings.methods import LoRAOptions

if TYPE_CHECKING:
    from assay.storage.linear import FrozenLinear


class DoRALinear(LoRALinear):
    """LoRA plus a trainable per-output-row magnitude ``lora_magnitude_vector`` [out]."""

    def __init__(
        self,
        base: nn.Linear | FrozenLinear,
        *,
        rank: int = LoRAOptions.rank,
        alpha: float = LoRAOptions.alpha,
        dropout: float = LoRAOptions.dropout,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(
            base, method="dora", rank=rank, alpha=alpha, dropout=dropout, generator=generator
        )
        self.lora_magnitude_vector = nn.Parameter(self.weight_norm())

    @classmethod
    def wrap(cls, base, *, method, options, generator, shared):
        return cls(
            base,
            generator=generator,
            rank=options["rank"],
            alpha=options["alpha"],
            dropout=options["dropout"],
        )

    @torch.no_grad()
    def weight_norm(self) -> torch.Tensor:
        """||W + sBA|| per output row (fp32, detached)."""
        # B(A(I))^T rather than B @ A: PEFT's order of operations, so the norms round alike.
        eye = torch.eye(self.in_features, dtype=self.lora_A.dtype, device=self.lora_A.device)
        update = self.lora_output(eye).T.float()
        combined = dense_weight(self.base) + self.scaling * update
        return torch.linalg.norm(combined, dim=1)

    def adapted(self, x: torch.Tensor, base_out: torch.Tensor) -> torch.Tensor:
        norm = self.weight_norm()
        scale = (self.lora_magnitude_vector / norm).to(base_out.dtype)
        bias = getattr(self.base, "bias", None)
        dropped = self.dropped(x)
        if self.dropout and self.training:
            # PEFT's rule: with dropout active the rescaled base term is W (no bias) applied to
            # the dropped input too.
            weight = dense_weight(self.base).to(dropped.dtype)
            plain = F.linear(dropped, weight).to(base_out.dtype)
        else:
            plain = base_out if bias is None else base_out - bias.to(base_out.dtype)
        lora = self.lora_output(dropped).to(base_out.dtype)
        return base_out + ((scale - 1) * plain + scale * lora * self.scaling)

    @torch.no_grad()
    def delta_weight(self) -> torch.Tensor:
        weight = dense_weight(self.base)
        combined = weight + self.scaling * (self.lora_B.float() @ self.lora_A.float())
        scale = self.lora_magnitude_vector.float() / torch.linalg.norm(combined, dim=1)
        return scale[:, None] * combined - weight
