"""Dense frozen weight storage in a narrower float dtype (bf16), converted per use."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class DenseWeight(nn.Module):
    """A frozen 2-D weight stored in ``dtype``; rows come back converted to the caller's dtype."""

    assay_packed = False
    weight: torch.Tensor  # a buffer, registered in __init__

    def __init__(self, weight: torch.Tensor, *, dtype: torch.dtype) -> None:
        super().__init__()
        self.shape = (int(weight.shape[0]), int(weight.shape[1]))
        self.register_buffer("weight", weight.detach().to(dtype).contiguous())

    row_align = 1

    def storage_tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors a conversion reads; saved for backward."""
        return (self.weight,)

    def rows(
        self,
        start: int,
        stop: int,
        dtype: torch.dtype,
        tensors: tuple[torch.Tensor, ...] | None = None,
    ) -> torch.Tensor:
        """Rows [start, stop) in ``dtype`` (a view, when the dtype already matches)."""
        weight = (tensors if tensors is not None else self.storage_tensors())[0]
        return weight[start:stop].to(dtype)

    def gather(self, index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Rows ``weight[index]`` in ``dtype``."""
        return F.embedding(index, self.weight).to(dtype)

    def workspace_bytes(self, tile_rows: int) -> int:
        """Bytes one converted tile of ``tile_rows`` rows occupies (fp32 worst case)."""
        return tile_rows * self.shape[1] * 4

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The whole matrix in ``dtype``."""
        return self.weight.to(dtype)
