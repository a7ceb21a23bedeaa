"""Defects in assay.train: losses, preference objectives, the training objective."""

from __future__ import annotations

from assay_testing.defects import Defect
from assay_testing.patching import Edit

DEFECTS: tuple[Defect, ...] = (
    # assay.train.losses
    Defect(
        "train.losses.mask_ignored",
        "reference CE scores every position, ignoring the loss mask",
        (
            Edit(
                "assay.train.losses:cross_entropy",
                "return (per_token * m).sum() / divisor",
                "return per_token.sum() / divisor",
            ),
        ),
    ),
    Defect(
        "train.losses.chunk_drops_row",
        "chunked CE slices each chunk one row short (off by one at chunk ends)",
        (
            Edit(
                "assay.train.losses:_ChunkedCE.forward",
                "rows = index[start : start + chunk_size]",
                "rows = index[start : start + chunk_size - 1]",
            ),
        ),
    ),
    Defect(
        "train.losses.chunk_edge_row_twice",
        "chunked CE slices each chunk one row long: the row at every chunk edge is scored twice",
        (
            Edit(
                "assay.train.losses:_ChunkedCE.forward",
                "rows = index[start : start + chunk_size]",
                "rows = index[start : start + chunk_size + 1]",
            ),
        ),
    ),
    Defect(
        "train.losses.chunk_mask_ignored",
        "chunked CE takes every position as scored: masked (prompt, last) labels are counted",
        (
            Edit(
                "assay.train.losses:_ChunkedCE.forward",
                "index = mask.nonzero().squeeze(1)",
                "index = torch.arange(mask.numel(), device=mask.device)",
            ),
        ),
    ),
    Defect(
        "train.losses.lse_block_edge_row",
        "row-blocked logsumexp gives each block's first row the previous block's last value",
        (
            Edit(
                "assay.train.losses:row_logsumexp",
                "    return out",
                "    out[LSE_ROWS::LSE_ROWS] = out[LSE_ROWS - 1 : -1 : LSE_ROWS]\n    return out",
            ),
        ),
    ),
    Defect(
        "train.losses.divisor_all_tokens",
        "chunked CE mean divides by all positions instead of scored tokens",
        (
            Edit(
                "assay.train.losses:chunked_cross_entropy",
                "divisor = _divisor(int(m.sum()), reduction)",
                "divisor = _divisor(m.numel(), reduction)",
            ),
        ),
    ),
    Defect(
        "train.losses.fused_grad_unscaled",
        "frozen-head fused gradient not divided by the token count",
        (
            Edit(
                "assay.train.losses:_ChunkedCE.forward",
                "    scale = torch.ones((), dtype=torch.float32, device=hidden.device) / divisor\n",
                "    scale = torch.ones((), dtype=torch.float32, device=hidden.device) / divisor\n"
                "    scale = scale * divisor\n",
            ),
        ),
    ),
    Defect(
        "train.losses.head_grad_dropped",
        "chunked CE returns no gradient for a trainable head",
        (
            Edit(
                "assay.train.losses:_ChunkedCE.backward",
                "grad_w = torch.zeros_like(w) if want_w else None",
                "grad_w = None",
            ),
        ),
    ),
    # assay.train.preference
    Defect(
        "train.preference.dpo_beta_sign",
        "DPO uses -beta * h: prefers the rejected completion",
        (Edit("assay.train.preference:dpo_losses", "z = beta * h", "z = -beta * h"),),
    ),
    Defect(
        "train.preference.token_logp_grad_sign",
        "chunked log-prob backward returns softmax - onehot (sign flipped)",
        (
            Edit(
                "assay.train.preference:_TokenLogps.backward",
                "        g *= grad_out[start:stop, None].float()\n",
                "        g.neg_()\n        g *= grad_out[start:stop, None].float()\n",
            ),
        ),
    ),
    Defect(
        "train.preference.chunk_offset_lost",
        "chunked log-prob backward reads the first chunk's row maxima and logsumexps for "
        "every chunk (a chunk-local index where a global one belongs)",
        (
            Edit(
                "assay.train.preference:_TokenLogps.backward",
                "sub_(top[start:stop, None])",
                "sub_(top[: stop - start, None])",
            ),
            Edit(
                "assay.train.preference:_TokenLogps.backward",
                "g.sub_(lse[start:stop, None])",
                "g.sub_(lse[: stop - start, None])",
            ),
        ),
    ),
    Defect(
        "train.preference.kto_z_not_detached",
        "KTO's KL reference point is not clamped at 0",
        (
            Edit(
                "assay.train.preference:kl_estimate",
                "(policy_kl - reference_kl).mean().clamp(min=0).detach()",
                "(policy_kl - reference_kl).mean().detach()",
            ),
        ),
    ),
    Defect(
        "train.preference.ipo_summed",
        "IPO uses summed instead of length-averaged log-probs",
        (
            Edit(
                "assay.train.preference:PreferenceSettings.average",
                "    return self.kind in AVERAGED\n",
                '    if self.kind == "ipo":\n        return False\n'
                "    return self.kind in AVERAGED\n",
            ),
        ),
    ),
    # assay.train.objective
    Defect(
        "train.objective.reference_not_disabled",
        "the DPO reference runs with the adapters enabled (reference = policy)",
        (
            Edit(
                "assay.train.objective:Objective.preference_loss",
                "with self.reference(self.base):",
                "with contextlib.nullcontext():",
            ),
        ),
    ),
    Defect(
        "train.objective.accumulation_not_divided",
        "preference loss not weighted by the micro-batch's share of the step's rows",
        (
            Edit(
                "assay.train.objective:Objective.loss",
                "return self.preference_loss(batch, divisor, row_share) * row_share",
                "return self.preference_loss(batch, divisor, row_share)",
            ),
        ),
    ),
    Defect(
        "train.objective.head_read_before_forward",
        "the preference log-probs read the LM head's weight before the forward, which under "
        "FSDP2 is a shard (every preference loss then fails on a sharded run)",
        (
            Edit(
                "assay.train.objective:Objective._logps",
                "hidden = self._hidden(ids, attention)",
                "weight, hidden = head_weight(self.base), self._hidden(ids, attention)",
            ),
            Edit(
                "assay.train.objective:Objective._logps",
                "token_logps(hidden, head_weight(self.base), labels",
                "token_logps(hidden, weight, labels",
            ),
        ),
    ),
    Defect(
        "train.objective.orpo_nll_per_micro_batch",
        "ORPO's NLL term a token mean within each micro-batch (and rank), not over the step",
        (
            Edit(
                "assay.train.objective:Objective.preference_loss",
                "nll = -per_token[:b].sum() / max(divisor, 1) / row_share",
                "nll = -per_token[:b].sum() / mask[:b].sum()",
            ),
        ),
    ),
    Defect(
        "train.objective.ce_micro_normalised",
        "CE divided by this micro-batch's scored tokens, not the step's",
        (
            Edit(
                "assay.train.objective:Objective.loss",
                "return summed / max(divisor, 1)",
                "return summed / max(int(batch.loss_mask.sum()), 1)",
            ),
        ),
    ),
)
