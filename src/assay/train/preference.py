"""Preference losses (DPO, IPO, ORPO, SimPO, KTO) and the metrics TRL users expect.

Everything here is math on per-sequence log-probabilities; running the model (policy, and the
reference as the same model with adapters disabled) is :mod:`assay.train.objective`'s job.

Conventions:

- ``token_logps`` gives, for every scored position, ``log p(labels[b, t] | prefix)`` in fp32,
  and 0 elsewhere. Labels are pre-shifted (see :mod:`assay.train.data.dataset`). It never holds more
  than ``chunk_size x vocab`` logits (and chunked CE's ``LSE_ROWS x vocab`` logsumexp
  workspace): forward keeps each scored token's largest logit and logsumexp, backward
  recomputes each chunk's logits (the chunked-CE idea, for a per-token upstream gradient).
  Logits are shifted by their row's largest first, as in chunked CE, so a confident token's
  log-prob keeps fp32's relative precision.
- Sequence log-probs are summed over the completion tokens for DPO and KTO and length-averaged
  for IPO, ORPO and SimPO (:data:`AVERAGED`).
- Every loss function returns per-example losses ``[B]``; the objective takes their mean.
  Rewards are detached; they exist for logging only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from assay.settings.choices import REFERENCE_FREE_LOSSES
from assay.train.losses import row_logsumexp, shift_to_max_

LOGP_CHUNK = 1024
KINDS = ("dpo", "ipo", "orpo", "simpo", "kto")
AVERAGED = ("ipo", "orpo", "simpo")
DPO_VARIANTS = ("sigmoid", "hinge", "robust")


class _TokenLogps(torch.autograd.Function):
    """log p(target) of each row of ``hidden [M, H]`` under ``weight [V, H]``, chunked."""

    @staticmethod
    def forward(
        ctx: Any, hidden: Tensor, weight: Tensor, targets: Tensor, chunk_size: int
    ) -> Tensor:
        w = weight.float()
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(out)
        top = torch.empty_like(out)  # each row's largest logit; lse is taken after it
        for start in range(0, hidden.shape[0], chunk_size):
            stop = min(start + chunk_size, hidden.shape[0])
            logits = hidden[start:stop].float() @ w.t()
            top[start:stop] = shift_to_max_(logits)
            lse[start:stop] = row_logsumexp(logits)
            picked = logits.gather(1, targets[start:stop, None]).squeeze(1)
            out[start:stop] = picked - lse[start:stop]
            del logits
        ctx.save_for_backward(hidden, weight, targets, top, lse)
        ctx.chunk_size = chunk_size
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        hidden, weight, targets, top, lse = ctx.saved_tensors
        want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        w = weight.float()
        grad_h = torch.empty_like(hidden, dtype=torch.float32) if want_h else None
        grad_w = torch.zeros_like(w) if want_w else None
        for start in range(0, hidden.shape[0], ctx.chunk_size):
            stop = min(start + ctx.chunk_size, hidden.shape[0])
            h = hidden[start:stop].float()
            # d log p(y) / d logits = onehot(y) - softmax, times each token's upstream gradient.
            g = (h @ w.t()).sub_(top[start:stop, None])  # in place: one V-wide copy
            g.sub_(lse[start:stop, None]).exp_().neg_()
            g[torch.arange(stop - start, device=g.device), targets[start:stop]] += 1
            g *= grad_out[start:stop, None].float()
            if grad_h is not None:
                grad_h[start:stop] = g @ w
            if grad_w is not None:
                grad_w.addmm_(g.t(), h)
            del g
        return (
            None if grad_h is None else grad_h.to(hidden.dtype),
            None if grad_w is None else grad_w.to(weight.dtype),
            None,
            None,
        )


def token_logps(
    hidden: Tensor, weight: Tensor, labels: Tensor, mask: Tensor, chunk_size: int = LOGP_CHUNK
) -> Tensor:
    """``[N, T]`` fp32: log-prob of ``labels`` where ``mask`` is True, exactly 0 elsewhere.

    ``hidden`` is ``[N, T, H]`` (final-normed), ``weight`` the ``[V, H]`` head. Only scored
    positions get logits; unscored ones get zero gradient.
    """
    if hidden.shape[:-1] != labels.shape or labels.shape != mask.shape:
        raise ValueError(
            f"hidden {tuple(hidden.shape)}, labels {tuple(labels.shape)} and mask "
            f"{tuple(mask.shape)} disagree (want [N, T, H], [N, T], [N, T])"
        )
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    mask = mask.bool()
    rows = hidden[mask]  # [M, H], row-major over (sequence, position)
    scored = _TokenLogps.apply(rows, weight, labels[mask], chunk_size)
    return torch.zeros(mask.shape, dtype=torch.float32, device=hidden.device).masked_scatter(
        mask, scored
    )


def sequence_logps(per_token: Tensor, mask: Tensor, average: bool) -> Tensor:
    """``[N]``: each row's summed (or, with ``average``, mean) scored-token log-prob."""
    summed = per_token.sum(-1)
    if not average:
        return summed
    counts = mask.sum(-1)
    if bool((counts == 0).any()):
        raise ValueError("a sequence has no scored tokens: its average log-prob is undefined")
    return summed / counts.to(summed.dtype)


@dataclass(frozen=True)
class PreferenceSettings:
    """One preference loss and its knobs; fields that do not apply are ignored."""

    kind: str
    beta: float = 0.1
    gamma: float = 0.5
    dpo_variant: str = "sigmoid"
    label_smoothing: float = 0.0
    desirable_weight: float = 1.0
    undesirable_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"preference loss {self.kind!r} is not one of {KINDS}")
        if self.dpo_variant not in DPO_VARIANTS:
            raise ValueError(f"dpo_variant {self.dpo_variant!r} is not one of {DPO_VARIANTS}")
        if not 0.0 <= self.label_smoothing < 0.5:
            raise ValueError(f"label_smoothing must be in [0, 0.5), got {self.label_smoothing}")

    @property
    def average(self) -> bool:
        return self.kind in AVERAGED

    @property
    def needs_reference(self) -> bool:
        return self.kind not in REFERENCE_FREE_LOSSES


@dataclass(frozen=True)
class PreferenceOutput:
    """Per-example losses ``[B]`` plus detached rewards and extras for the metrics."""

    losses: Tensor
    chosen_rewards: Tensor
    rejected_rewards: Tensor
    extras: dict[str, Tensor]


def dpo_losses(
    h: Tensor, beta: float, variant: str = "sigmoid", label_smoothing: float = 0.0
) -> Tensor:
    """DPO on ``h = (pi_c - ref_c) - (pi_r - ref_r)``.

    sigmoid: ``-log sigmoid(beta h)``; hinge: ``relu(1 - beta h)``; robust (noise-tolerant,
    flip rate eps): ``((1 - eps)(-log sigmoid(beta h)) - eps(-log sigmoid(-beta h))) / (1 - 2
    eps)``, which is sigmoid DPO at eps 0.
    """
    z = beta * h
    if variant == "sigmoid":
        return -F.logsigmoid(z)
    if variant == "hinge":
        return torch.relu(1.0 - z)
    if variant == "robust":
        eps = label_smoothing
        return ((1 - eps) * -F.logsigmoid(z) + eps * F.logsigmoid(-z)) / (1 - 2 * eps)
    raise ValueError(f"dpo_variant {variant!r} is not one of {DPO_VARIANTS}")


def log_odds(avg_logp: Tensor) -> Tensor:
    """``l - log(1 - e^l)`` for an average log-prob ``l < 0`` (expm1 keeps l near 0 exact)."""
    return avg_logp - torch.log(-torch.expm1(avg_logp))


def pair_losses(
    s: PreferenceSettings,
    policy: Tensor,
    reference: Tensor | None,
    chosen_nll: Tensor | None = None,
) -> PreferenceOutput:
    """DPO/IPO/ORPO/SimPO for ``policy`` (and ``reference``) sequence log-probs ``[2B]``,
    chosen first. ``chosen_nll`` is ORPO's token-mean NLL of the chosen completions."""
    b = policy.shape[0] // 2
    pc, pr = policy[:b], policy[b:]
    extras: dict[str, Tensor] = {}
    if s.kind in ("dpo", "ipo"):
        if reference is None:
            raise ValueError(f"{s.kind} needs reference log-probs")
        rc, rr = reference[:b], reference[b:]
        h = (pc - rc) - (pr - rr)
        if s.kind == "dpo":
            losses = dpo_losses(h, s.beta, s.dpo_variant, s.label_smoothing)
        else:
            losses = (h - 1.0 / (2.0 * s.beta)) ** 2
        chosen, rejected = s.beta * (pc - rc), s.beta * (pr - rr)
    elif s.kind == "simpo":
        losses = -F.logsigmoid(s.beta * (pc - pr) - s.gamma)
        chosen, rejected = s.beta * pc, s.beta * pr
    elif s.kind == "orpo":
        if chosen_nll is None:
            raise ValueError("orpo needs the chosen NLL")
        ratio = F.logsigmoid(log_odds(pc) - log_odds(pr))
        losses = chosen_nll - s.beta * ratio
        chosen, rejected = s.beta * pc, s.beta * pr
        extras = {"nll_loss": chosen_nll.detach(), "log_odds_ratio": ratio.detach().mean()}
    else:
        raise ValueError(f"pair_losses does not compute {s.kind!r}")
    return PreferenceOutput(losses, chosen.detach(), rejected.detach(), extras)


def kto_losses(
    s: PreferenceSettings, delta: Tensor, desirable: Tensor, z_ref: Tensor
) -> PreferenceOutput:
    """KTO per example: ``delta = pi - ref`` (summed), ``desirable [N] bool``, ``z_ref`` the
    (already clamped, detached) KL estimate. Rewards: chosen = desirable rows, rejected = the
    others (either may be empty)."""
    z = z_ref.detach()
    good = s.desirable_weight * (1 - torch.sigmoid(s.beta * (delta - z)))
    bad = s.undesirable_weight * (1 - torch.sigmoid(s.beta * (z - delta)))
    losses = torch.where(desirable, good, bad)
    rewards = (s.beta * delta).detach()
    return PreferenceOutput(losses, rewards[desirable], rewards[~desirable], {"kl": z})


def kl_estimate(policy_kl: Tensor, reference_kl: Tensor) -> Tensor:
    """KTO's z_ref: mean (pi - ref) over mismatched pairs, clamped at 0, detached."""
    return (policy_kl - reference_kl).mean().clamp(min=0).detach()


def metrics(out: PreferenceOutput, policy: Tensor, desirable: Tensor | None = None) -> dict:
    """TRL-named metrics as detached 0-d tensors (means over the batch's examples).

    Pairs: rewards/{chosen,rejected,margins,accuracies}, logps/{chosen,rejected}. KTO: the
    rewards of whichever side the batch has, margins when both, logps, and ``kl``; KTO has no
    pairs, so no accuracy.
    """
    found: dict[str, Tensor] = {}
    policy = policy.detach()
    if desirable is None:
        b = policy.shape[0] // 2
        found["logps/chosen"], found["logps/rejected"] = policy[:b].mean(), policy[b:].mean()
        found["rewards/accuracies"] = (out.chosen_rewards > out.rejected_rewards).float().mean()
        found["rewards/margins"] = (out.chosen_rewards - out.rejected_rewards).mean()
    else:
        if bool(desirable.any()):
            found["logps/chosen"] = policy[desirable].mean()
        if bool((~desirable).any()):
            found["logps/rejected"] = policy[~desirable].mean()
        if out.chosen_rewards.numel() and out.rejected_rewards.numel():
            found["rewards/margins"] = out.chosen_rewards.mean() - out.rejected_rewards.mean()
    if out.chosen_rewards.numel():
        found["rewards/chosen"] = out.chosen_rewards.mean()
    if out.rejected_rewards.numel():
        found["rewards/rejected"] = out.rejected_rewards.mean()
    found.update(out.extras)
    return found
