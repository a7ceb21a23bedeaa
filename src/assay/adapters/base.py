"""The adapter contract: a module that wraps one frozen linear and adds a learned update.

An adapter never looks inside the wrapped layer's storage. It uses the layer's call contract
(``x -> x W^T + b``), ``in_features``/``out_features``/``bias``, and ``dense_weight`` below,
which returns the dense fp32 weight of an ``nn.Linear`` or of an ``assay.storage.FrozenLinear``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from assay.errors import ConfigError

if TYPE_CHECKING:
    from assay.storage.linear import FrozenLinear


def dense_weight(base: nn.Module) -> torch.Tensor:
    """The wrapped layer's weight as a dense fp32 [out, in] tensor, detached from autograd."""
    if isinstance(base, nn.Linear):
        return base.weight.detach().float()
    accessor = getattr(base, "dequantized_weight", None)
    if accessor is None:
        raise ConfigError(
            f"cannot read the dense weight of {type(base).__name__}; expected nn.Linear "
            "or a layer with dequantized_weight()"
        )
    return accessor(torch.float32).detach()


class AdapterLinear(nn.Module):
    """Base class of every adapter: ``base`` (frozen, never trained here) plus ``delta``.

    Guarantees: while disabled, ``forward`` is exactly ``base(x)``; while merged, the update
    lives in ``base.weight`` and ``forward`` is ``base(x)``. Subclasses implement
    ``adapted(x, base_out)`` and ``delta_weight()`` (the dense fp32 update, W' - W).
    """

    @classmethod
    def wrap(
        cls,
        base: nn.Linear | FrozenLinear,
        *,
        method: str,
        options: dict[str, Any],
        generator: torch.Generator,
        shared: dict[str, Any],
    ) -> AdapterLinear:
        """A new adapter of ``method`` around ``base``, from the registry's resolved
        ``options``. ``shared`` is one dict per ``attach`` call, for state every site shares."""
        raise NotImplementedError(f"{cls.__name__} does not implement wrap")

    assay_adapter = True
    assay_base = ("base",)
    method = "abstract"

    def __init__(self, base: nn.Linear | FrozenLinear) -> None:
        super().__init__()
        self.base = base
        self.in_features = int(base.in_features)
        self.out_features = int(base.out_features)
        self.enabled = True
        self.merged = False

    # -- switching ---------------------------------------------------------------------------
    def disable(self) -> None:
        """Route ``forward`` to the base layer alone (the DPO reference policy)."""
        if self.merged:
            raise ConfigError("cannot disable a merged adapter; unmerge it first")
        self.enabled = False

    def enable(self) -> None:
        self.enabled = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        if not self.enabled or self.merged:
            return out
        return self.adapted(x, out)

    def adapted(self, x: torch.Tensor, base_out: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # -- merging -----------------------------------------------------------------------------
    def delta_weight(self) -> torch.Tensor:
        """W_adapted - W as a dense fp32 [out, in] tensor (no autograd)."""
        raise NotImplementedError

    def merged_weight(self) -> torch.Tensor:
        """The dense fp32 weight whose plain linear equals this adapter's function.

        Works for any storage (an NF4 base is dequantized first). Once merged, the base weight
        already holds the update and is returned as it is.
        """
        weight = dense_weight(self.base)
        if self.merged or not self.enabled:
            return weight
        return weight + self.delta_weight()

    def _float_base(self) -> nn.Linear:
        if not isinstance(self.base, nn.Linear) or self.base.weight.dtype != torch.float32:
            raise ConfigError(
                f"merge needs float32 storage, but this adapter wraps {type(self.base).__name__}; "
                "use assay.adapters.export.export_merged, which dequantizes, merges and writes a "
                "new file"
            )
        return self.base

    @torch.no_grad()
    def merge(self) -> None:
        """Fold the update into the float32 base weight (not bit exact: one fp32 rounding)."""
        if self.merged:
            return
        base = self._float_base()
        self._unmerge_state = self.merge_state()
        base.weight.copy_(self.merged_weight())
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """Undo ``merge``; the base weight comes back within fp32 rounding of the original."""
        if not self.merged:
            return
        base = self._float_base()
        base.weight.copy_(self.unmerged_weight(base.weight.detach(), self._unmerge_state))
        del self._unmerge_state
        self.merged = False

    def merge_state(self) -> torch.Tensor:
        """What ``unmerged_weight`` needs, captured at merge time (the delta, by default)."""
        return self.delta_weight()

    def unmerged_weight(self, merged: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return merged - state
