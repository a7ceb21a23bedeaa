"""Cross-entropy over the LM head: the plain reference and a chunked, memory-lean version.

Both take final-normed hidden states ``[..., H]``, the head weight ``[V, H]``, targets
``labels [...]`` (already shifted: see assay.train.data.dataset) and a boolean ``mask [...]`` of the
scored positions. Logits are computed in fp32 whatever the input dtype. ``reduction`` is
``mean`` (over scored tokens) or ``sum`` (for gradient accumulation weighted by tokens).
A batch with no scored token is a ValueError rather than a silent NaN.

``chunked_cross_entropy`` never holds more than ``chunk_size x V`` logits (and ``LSE_ROWS x V``
of logsumexp workspace). With a frozen head
(every adapter method) the forward forms each chunk's ``softmax - onehot`` right after its loss
and accumulates the hidden-state gradient then (the fused linear cross-entropy idea): the head
runs twice per step, as in plain CE, and never once more. When the head weight trains, forward
keeps only each token's largest logit and logsumexp and backward recomputes each chunk's logits
(the Cut Cross-Entropy idea), so no ``V x H`` gradient waits between forward and backward.

Each chunk's logits are first shifted by their row's largest logit (:func:`shift_to_max_`), so
a token's loss is the sum of two non-negative terms and a confident token keeps fp32's relative
precision, as ``log_softmax`` does.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from assay.settings import default as setting_default

_REDUCTIONS = ("mean", "sum")

CHUNK_SIZE: int = setting_default("loss.chunk_size", "chunked_ce")
LSE_ROWS = 16  # rows per logsumexp call (assay.memory.predict mirrors it)


def _flatten(hidden: Tensor, labels: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    if hidden.shape[:-1] != labels.shape or labels.shape != mask.shape:
        raise ValueError(
            f"hidden {tuple(hidden.shape)}, labels {tuple(labels.shape)} and mask "
            f"{tuple(mask.shape)} disagree (want [..., H], [...], [...])"
        )
    return hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1), mask.reshape(-1).bool()


def _divisor(count: int, reduction: str) -> float:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction {reduction!r} is not one of {_REDUCTIONS}")
    if count == 0:
        raise ValueError("no scored tokens in the batch: the mean loss is undefined")
    return float(count) if reduction == "mean" else 1.0


def cross_entropy(
    hidden: Tensor, weight: Tensor, labels: Tensor, mask: Tensor, reduction: str = "mean"
) -> Tensor:
    """Reference CE: the full fp32 logits ``[tokens, V]`` at once, masked, reduced."""
    h, y, m = _flatten(hidden, labels, mask)
    divisor = _divisor(int(m.sum()), reduction)
    logits = h.float() @ weight.float().t()
    targets = torch.where(m, y, torch.zeros_like(y))  # masked labels may be any id
    per_token = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
    return (per_token * m).sum() / divisor


def row_logsumexp(logits: Tensor) -> Tensor:
    """``torch.logsumexp(logits, dim=-1)`` of a [rows, V] tensor, bit for bit, taken LSE_ROWS
    rows at a time so its workspace is LSE_ROWS x V, not a second copy of the chunk's logits.

    Every call covers at least two rows: a one-row reduction over a long row may be split
    across threads and summed in another order, so a lone last row is recomputed beside the
    row before it.
    """
    rows = logits.shape[0]
    if rows <= LSE_ROWS:
        return torch.logsumexp(logits, dim=-1)
    out = logits.new_empty(rows)
    for start in range(0, rows, LSE_ROWS):
        first = min(start, rows - 2)
        out[first : start + LSE_ROWS] = torch.logsumexp(logits[first : start + LSE_ROWS], dim=-1)
    return out


def shift_to_max_(logits: Tensor) -> Tensor:
    """Subtract each row's largest logit from a [rows, V] tensor, in place; returns the maxima.

    A token's loss is then ``logsumexp(row) - row[target]``: two non-negative terms. Taken on the
    unshifted logits it is a difference of two numbers of the logits' size, rounded to their
    ulp (2e-6 at 30), which is all there is of a confident token's loss.
    """
    top = logits.amax(dim=-1)
    logits.sub_(top[:, None])
    return top


def _scored_gradient(logits: Tensor, lse: Tensor, labels: Tensor, scale: Tensor | float) -> Tensor:
    """d loss / d logits = (softmax - onehot(target)) * scale, formed in ``logits``' memory."""
    probs = logits.sub_(lse[:, None]).exp_()
    probs[torch.arange(labels.numel(), device=probs.device), labels] -= 1
    return probs.mul_(scale)


class _ChunkedCE(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        hidden: Tensor,
        weight: Tensor,
        labels: Tensor,
        mask: Tensor,
        chunk_size: int,
        divisor: float,
    ) -> Tensor:
        index = mask.nonzero().squeeze(1)  # only scored rows need logits
        w = weight.float()
        # Frozen head: the gradient of the hidden states is formed now, chunk by chunk.
        fused = ctx.needs_input_grad[0] and not ctx.needs_input_grad[1]
        grad_h = torch.zeros_like(hidden, dtype=torch.float32) if fused else None
        scale = torch.ones((), dtype=torch.float32, device=hidden.device) / divisor
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        lse = torch.empty(index.numel(), dtype=torch.float32, device=hidden.device)
        top = torch.empty_like(lse)  # each row's largest logit; lse is taken after it
        for start in range(0, index.numel(), chunk_size):
            rows = index[start : start + chunk_size]
            chunk_labels = labels.index_select(0, rows)
            logits = hidden.index_select(0, rows).float() @ w.t()
            top[start : start + rows.numel()] = shift_to_max_(logits)
            chunk_lse = row_logsumexp(logits)
            target = logits.gather(1, chunk_labels[:, None]).squeeze(1)
            lse[start : start + rows.numel()] = chunk_lse
            total = total + (chunk_lse - target).sum()
            if grad_h is not None:
                grad_h.index_copy_(
                    0, rows, _scored_gradient(logits, chunk_lse, chunk_labels, scale) @ w
                )
            del logits
        if grad_h is not None:
            ctx.save_for_backward(grad_h)
        else:
            ctx.save_for_backward(hidden, weight, labels, index, top, lse)
        ctx.fused, ctx.chunk_size, ctx.divisor = fused, chunk_size, divisor
        ctx.hidden_dtype = hidden.dtype
        return total / divisor

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        if ctx.fused:
            (grad_h,) = ctx.saved_tensors
            return ((grad_h * grad_out.float()).to(ctx.hidden_dtype), *([None] * 5))
        hidden, weight, labels, index, top, lse = ctx.saved_tensors
        want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        scale = grad_out.float() / ctx.divisor
        w = weight.float()
        grad_h = torch.zeros_like(hidden, dtype=torch.float32) if want_h else None
        grad_w = torch.zeros_like(w) if want_w else None
        for start in range(0, index.numel(), ctx.chunk_size):
            rows = index[start : start + ctx.chunk_size]
            h = hidden.index_select(0, rows).float()
            chunk = slice(start, start + rows.numel())
            logits = (h @ w.t()).sub_(top[chunk, None])
            probs = _scored_gradient(logits, lse[chunk], labels.index_select(0, rows), scale)
            if grad_h is not None:
                grad_h.index_copy_(0, rows, probs @ w)
            if grad_w is not None:
                grad_w.addmm_(probs.t(), h)
            del logits, probs  # one tensor: both names go before the next chunk's logits
        return (
            None if grad_h is None else grad_h.to(hidden.dtype),
            None if grad_w is None else grad_w.to(weight.dtype),
            None,
            None,
            None,
            None,
        )


def chunked_cross_entropy(
    hidden: Tensor,
    weight: Tensor,
    labels: Tensor,
    mask: Tensor,
    chunk_size: int = CHUNK_SIZE,
    reduction: str = "mean",
) -> Tensor:
    """CE equal to :func:`cross_entropy` (to fp32 rounding) with peak O(chunk_size x V).

    Only scored tokens are computed; unscored positions get zero gradient. A non-fp32
    ``weight`` is cast to fp32 once per call (a parameter-sized copy).
    """
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    h, y, m = _flatten(hidden, labels, mask)
    divisor = _divisor(int(m.sum()), reduction)
    loss = _ChunkedCE.apply(h, weight, y, m, chunk_size, divisor)
    return loss
