"""What a micro-batch's loss is: next-token CE (full or chunked) or a preference loss.

Preference losses (DPO, IPO, ORPO, SimPO, KTO; the math is in :mod:`assay.train.preference`)
run chosen and rejected rows through the model as ONE batch (a Batch holds every chosen row,
then every rejected row). The reference policy is the same model with its adapters disabled,
under no_grad, so it costs no second copy of the weights and no activation memory for backward.
It is computed BEFORE the policy forward: a streamed backward recomputes each layer with the
adapters as they are at backward time, so adapters must never be toggled between a policy
forward and its backward.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from assay.adapters import disabled
from assay.adapters.base import dense_weight
from assay.settings import TrainConfig
from assay.train.data.dataset import Batch
from assay.train.losses import chunked_cross_entropy, cross_entropy
from assay.train.preference import (
    KINDS,
    LOGP_CHUNK,
    PreferenceSettings,
    kl_estimate,
    kto_losses,
    metrics,
    pair_losses,
    sequence_logps,
    token_logps,
)

if TYPE_CHECKING:
    from assay.model.decoder import Decoder
    from assay.model.runner import Runner

CE_KINDS = ("ce", "chunked_ce")
Reference = Callable[[nn.Module], contextlib.AbstractContextManager[object]]


def head_weight(base: Decoder) -> torch.Tensor:
    """The LM head's [vocab, hidden] weight; an NF4-stored head is dequantized for the loss."""
    head = base.lm_head
    if isinstance(head, nn.Linear):
        return head.weight
    return dense_weight(head)


def preference_settings(config: TrainConfig) -> PreferenceSettings:
    """The config's loss section as :class:`PreferenceSettings` (missing knobs: defaults).

    Robust DPO defaults to a flip rate of 0.1, the other variants to 0.
    """
    loss = config.loss
    variant = loss.dpo_variant or "sigmoid"
    smoothing = loss.label_smoothing
    if smoothing is None:
        smoothing = 0.1 if variant == "robust" else 0.0
    present = {
        k: getattr(loss, k)
        for k in ("beta", "gamma", "desirable_weight", "undesirable_weight")
        if getattr(loss, k) is not None
    }
    return PreferenceSettings(
        loss.type, dpo_variant=variant, label_smoothing=float(smoothing), **present
    )


def mismatched(batch: Batch) -> tuple[torch.Tensor, ...]:
    """KTO's KL pairs: row i's prompt with row i-1's completion (rotated; a batch of one
    pairs a row with itself). Returns input_ids, attention_mask, labels, loss_mask."""
    rows = []
    for i in range(len(batch.lengths)):
        n = int(batch.lengths[i])
        ids = batch.input_ids[i, :n]
        # loss_mask[t] scores token t + 1, so the completion starts one past the first True.
        start = int(batch.loss_mask[i].nonzero()[0]) + 1
        rows.append((ids[:start], ids[start:]))
    pairs = [(rows[i][0], rows[i - 1][1]) for i in range(len(rows))]
    width = max(len(p) + len(c) for p, c in pairs)
    pad = 0  # any id: padded positions are neither attended to nor scored
    n = len(pairs)
    input_ids = torch.full((n, width), pad, dtype=torch.int64)
    attention = torch.zeros((n, width), dtype=torch.int64)
    loss_mask = torch.zeros((n, width), dtype=torch.bool)
    for i, (prompt, completion) in enumerate(pairs):
        p, c = len(prompt), len(completion)
        input_ids[i, : p + c] = torch.cat([prompt, completion])
        attention[i, : p + c] = 1
        loss_mask[i, p - 1 : p + c - 1] = True
    labels = torch.full_like(input_ids, pad)
    labels[:, :-1] = input_ids[:, 1:]
    return input_ids, attention, labels, loss_mask


# precision setting -> the dtype the decoder autocasts to (float32: no autocast)
AUTOCAST_DTYPES = {"bf16": torch.bfloat16}


class Objective:
    """Computes ``loss(batch)`` for the configured loss type on the run's model.

    ``reference`` is how the reference policy is entered (default: adapters disabled); the
    gates inject a wrong one as a control.
    """

    def __init__(
        self,
        config: TrainConfig,
        model: Runner,
        base: Decoder,
        *,
        reference: Reference = disabled,
        chunk_size: int = LOGP_CHUNK,
    ) -> None:
        self.config, self.model, self.base = config, model, base
        self.kind = config.loss.type
        self.reference, self.chunk_size = reference, chunk_size
        self.settings = preference_settings(config) if self.kind in KINDS else None
        if self.kind not in CE_KINDS and self.settings is None:
            raise NotImplementedError(f"loss {self.kind!r} is not implemented yet")
        self._metrics: dict[str, torch.Tensor] = {}

    def hidden(self, batch: Batch) -> torch.Tensor:
        return self._hidden(batch.input_ids, batch.attention_mask)

    def _hidden(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # Unpadded batches take SDPA's causal fast path; padded ones need the explicit mask.
        padded = None if bool(mask.all()) else mask
        with self.precision(input_ids.device):
            return self.model.hidden_states(input_ids, padded)

    def precision(self, device: torch.device) -> contextlib.AbstractContextManager[object]:
        """The decoder's compute precision on ``device``: autocast to bfloat16 for
        ``precision: bf16`` (the final norm's output, the head and the loss stay float32)."""
        dtype = AUTOCAST_DTYPES.get(self.config.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=dtype)

    def normaliser(self, batch: Batch) -> int:
        """The tokens of ``batch`` that the step's loss is divided by, summed over the step's
        micro-batches (and ranks): every scored token for CE, the chosen completions' tokens
        for ORPO (its NLL term is one token mean over the step), none for the other
        preference losses (means over pairs or rows)."""
        if self.settings is None:
            return int(batch.loss_mask.sum())
        if self.settings.kind == "orpo":
            return int(batch.loss_mask[: batch.loss_mask.shape[0] // 2].sum())
        return 0

    def loss(self, batch: Batch, divisor: int, row_share: float) -> torch.Tensor:
        """This micro-batch's share of the step loss; the shares of a step's micro-batches (on
        every rank) sum to the loss of the step's rows taken as one batch. ``divisor``: the
        step's :meth:`normaliser` total. ``row_share``: this micro-batch's rows over the step's.

        CE: the summed token loss / ``divisor``. Preference: the mean over this micro-batch's
        pairs (KTO: rows) x ``row_share``, ORPO's NLL term being the chosen tokens' summed NLL
        / ``divisor``."""
        if self.settings is not None:
            return self.preference_loss(batch, divisor, row_share) * row_share
        hidden = self.hidden(batch)
        weight = head_weight(self.base)
        if self.kind == "chunked_ce":
            summed = chunked_cross_entropy(
                hidden,
                weight,
                batch.labels,
                batch.loss_mask,
                # chunk_size applies to chunked_ce, so it is set
                cast(int, self.config.loss.chunk_size),
                reduction="sum",
            )
        else:
            summed = cross_entropy(hidden, weight, batch.labels, batch.loss_mask, reduction="sum")
        return summed / max(divisor, 1)

    def metrics(self) -> dict[str, float]:
        """TRL-named metrics of the last preference batch (empty for CE)."""
        return {k: float(v) for k, v in self._metrics.items()}

    def _logps(self, ids, attention, labels, mask, *, grad: bool) -> torch.Tensor:
        context = contextlib.nullcontext() if grad else torch.no_grad()
        with context:
            hidden = self._hidden(ids, attention)
            # the head's weight is read after the forward, which gathers it under FSDP2
            per_token = token_logps(hidden, head_weight(self.base), labels, mask, self.chunk_size)
        return per_token

    def preference_loss(self, batch: Batch, divisor: int, row_share: float) -> torch.Tensor:
        """Mean preference loss of ``batch`` (ORPO's NLL term scaled as :meth:`loss` says);
        records :meth:`metrics`."""
        s = self.settings
        assert s is not None
        fields = (batch.input_ids, batch.attention_mask, batch.labels, batch.loss_mask)
        mask = batch.loss_mask
        reference = policy_kl = reference_kl = None
        if s.needs_reference:
            with self.reference(self.base):
                reference = sequence_logps(self._logps(*fields, grad=False), mask, s.average)
                if s.kind == "kto":
                    kl_fields = mismatched(batch)
                    reference_kl = self._logps(*kl_fields, grad=False).sum(-1)
            if s.kind == "kto":
                policy_kl = self._logps(*kl_fields, grad=False).sum(-1)
        per_token = self._logps(*fields, grad=True)
        policy = sequence_logps(per_token, mask, s.average)
        if s.kind == "kto":
            if batch.kto_labels is None:
                raise ValueError("kto needs kto rows (prompt, completion, label)")
            # kto takes a reference, so its log-probabilities are set
            z_ref = kl_estimate(cast(torch.Tensor, policy_kl), cast(torch.Tensor, reference_kl))
            out = kto_losses(s, policy - cast(torch.Tensor, reference), batch.kto_labels, z_ref)
            self._metrics = metrics(out, policy, batch.kto_labels)
        else:
            nll = None
            if s.kind == "orpo":
                b = mask.shape[0] // 2
                # a token mean over the whole step; / row_share undoes the pair mean's weight
                nll = -per_token[:b].sum() / max(divisor, 1) / row_share
            out = pair_losses(s, policy, reference, nll)
            self._metrics = metrics(out, policy)
        return out.losses.mean()
