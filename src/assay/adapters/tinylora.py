"""TinyLoRA: a handful of trainable scalars steering a fixed random basis of the frozen W.

With the truncated rank-r SVD W ~ U S V^T (U: out x r, S: r, V^T: r x in) and a fixed random
P in R^{u x r x r} (entries N(0, 1/r)), the update is delta W = U S (sum_i v_i P_i) V^T with
only v in R^u trainable ("U Sigma" basis of "Learning to Reason in 13 Parameters"). v starts at
0, so a fresh adapter is an exact no-op. U, S, V^T and P are buffers: they are saved with the
adapter and a reload reproduces the function bit for bit. With ``sharing="global"`` every
target holds the same ``tiny_v`` Parameter object, so the model has u trainable scalars in all.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from assay.adapters.base import AdapterLinear, dense_weight
from assay.errors import ConfigError

if TYPE_CHECKING:
    from assay.storage.linear import FrozenLinear


class TinyLoRALinear(AdapterLinear):
    """delta W = (U * S) @ (sum_i v_i P_i) @ V^T around one frozen linear."""

    method = "tinylora"
    # Buffers, registered in __init__: U, S and V^T of the base's truncated SVD, and P.
    tiny_U: torch.Tensor
    tiny_S: torch.Tensor
    tiny_V: torch.Tensor
    tiny_P: torch.Tensor

    def __init__(
        self,
        base: nn.Linear | FrozenLinear,
        *,
        u: int,
        r: int,
        vector: nn.Parameter | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(base)
        for name, value in (("u", u), ("r", r)):
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"tinylora option {name} must be a positive int, got {value!r}")
        if r > min(self.in_features, self.out_features):
            raise ConfigError(
                f"tinylora option r={r} exceeds the layer's rank bound "
                f"{min(self.in_features, self.out_features)}"
            )
        self.u, self.r = u, r
        left, singular, right = torch.linalg.svd(dense_weight(base), full_matrices=False)
        self.register_buffer("tiny_U", left[:, :r].contiguous())
        self.register_buffer("tiny_S", singular[:r].contiguous())
        self.register_buffer("tiny_V", right[:r].contiguous())  # V^T, r x in
        projections = torch.randn(u, r, r, generator=generator) / math.sqrt(r)
        self.register_buffer("tiny_P", projections)
        if vector is None:
            vector = nn.Parameter(torch.zeros(u))
        elif tuple(vector.shape) != (u,):
            raise ConfigError(f"tinylora vector has shape {tuple(vector.shape)}, need ({u},)")
        self.tiny_v = vector

    @classmethod
    def wrap(cls, base, *, method, options, generator, shared):
        u = int(options["u"])
        # global sharing: the whole model trains one vector of u numbers
        vector = shared.setdefault("vector", nn.Parameter(torch.zeros(u)))
        return cls(
            base,
            u=u,
            r=options["r"],
            generator=generator,
            vector=vector if options["sharing"] == "global" else None,
        )

    def mixing(self) -> torch.Tensor:
        """sum_i v_i P_i, an r x r matrix (differentiable in v)."""
        return torch.einsum("u,uij->ij", self.tiny_v, self.tiny_P)

    def adapted(self, x: torch.Tensor, base_out: torch.Tensor) -> torch.Tensor:
        h = F.linear(x.to(self.tiny_V.dtype), self.tiny_V)  # x V: [.., r]
        h = F.linear(h, self.mixing())  # (sum v_i P_i) applied: h R^T
        h = F.linear(h, self.tiny_U * self.tiny_S)  # (U S) on the left
        return base_out + h.to(base_out.dtype)

    @torch.no_grad()
    def delta_weight(self) -> torch.Tensor:
        return (self.tiny_U * self.tiny_S) @ self.mixing() @ self.tiny_V

    def extra_repr(self) -> str:
        return f"u={self.u}, r={self.r}"
