"""What a micro-batch's loss is: next-token CE (full or chunked); preference losses join later."""

from __future__ import annotations

import torch
from torch import nn

from assay.adapters.base import dense_weight
from assay.train.config import TrainConfig
from assay.train.data import Batch
from assay.train.losses import chunked_cross_entropy, cross_entropy


def head_weight(base: nn.Module) -> torch.Tensor:
    """The LM head's [vocab, hidden] weight; an NF4-stored head is dequantized for the loss."""
    head = base.lm_head
    if isinstance(head, nn.Linear):
        return head.weight
    return dense_weight(head)


class Objective:
    """Computes ``loss(batch)`` for the configured loss type on the run's model."""

    def __init__(self, config: TrainConfig, model: nn.Module, base: nn.Module) -> None:
        self.config, self.model, self.base = config, model, base
        self.kind = config.loss.type
        if self.kind not in ("ce", "chunked_ce"):
            raise NotImplementedError(f"loss {self.kind!r} is not implemented yet")

    def hidden(self, batch: Batch) -> torch.Tensor:
        mask = batch.attention_mask
        # Unpadded batches take SDPA's causal fast path; padded ones need the explicit mask.
        padded = None if bool(mask.all()) else mask
        return self.model.hidden_states(batch.input_ids, padded)

    def loss(self, batch: Batch, scored_total: int, micro_batches: int) -> torch.Tensor:
        """This micro-batch's summed token loss divided by the step's scored tokens."""
        hidden = self.hidden(batch)
        weight = head_weight(self.base)
        if self.kind == "chunked_ce":
            summed = chunked_cross_entropy(
                hidden,
                weight,
                batch.labels,
                batch.loss_mask,
                self.config.loss.chunk_size or 1024,
                reduction="sum",
            )
        else:
            summed = cross_entropy(hidden, weight, batch.labels, batch.loss_mask, reduction="sum")
        return summed / max(scored_total, 1)
