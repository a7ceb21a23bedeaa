"""The gate-preference oracle: SPEC's preference losses written in plain torch on full logits.

Independent of assay.train.preference: log_softmax over the whole vocabulary, masks built from
raw (prompt, completion) token lists, and autograd for the gradients. gate-dynamics uses it too,
on SmolLM2, for DPO's row-chunked log-probs (``dynamics/chunked_helpers``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from assay.train.data.dataset import collate
from assay.train.data.masks import Example, TokenSeq

BETA = {"dpo": 0.1, "ipo": 0.1, "orpo": 0.1, "simpo": 2.0, "kto": 0.1}
GAMMA = 0.5


def completion_logps(model, rows) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed completion log-probs [N] and completion lengths [N], via log_softmax."""
    width = max(len(p) + len(c) for p, c in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    attention = torch.zeros_like(ids)
    scored = torch.zeros((len(rows), width), dtype=torch.bool)  # scored[i, j]: token j
    for i, (p, c) in enumerate(rows):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        attention[i, : len(p) + len(c)] = 1
        scored[i, len(p) : len(p) + len(c)] = True
    logp = model(ids, attention).log_softmax(-1)  # position t predicts token t + 1
    picked = logp[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    return (picked * scored[:, 1:]).sum(-1), scored.sum(-1)


def formula_loss(spec, policy, reference, rows, kto_labels=None) -> torch.Tensor:
    _, kind, variant, eps = spec
    beta = BETA[kind]
    pi, count = completion_logps(policy, rows)
    with torch.no_grad():
        ref, _ = completion_logps(reference, rows)
    if kind == "kto":
        kl_rows = [(rows[i][0], rows[i - 1][1]) for i in range(len(rows))]
        with torch.no_grad():
            z = completion_logps(policy, kl_rows)[0] - completion_logps(reference, kl_rows)[0]
            z = torch.clamp(z.mean(), min=0.0)
        delta = pi - ref
        good = 1 - torch.sigmoid(beta * (delta - z))
        bad = 1 - torch.sigmoid(beta * (z - delta))
        return torch.where(kto_labels, good, bad).mean()
    b = len(rows) // 2
    if kind in ("ipo", "orpo", "simpo"):
        pi_avg, ref_avg = pi / count, ref / count
    if kind == "dpo":
        z = beta * ((pi[:b] - ref[:b]) - (pi[b:] - ref[b:]))
        if variant == "sigmoid":
            return F.softplus(-z).mean()
        if variant == "hinge":
            return torch.clamp(1 - z, min=0).mean()
        return (((1 - eps) * F.softplus(-z) - eps * F.softplus(z)) / (1 - 2 * eps)).mean()
    if kind == "ipo":
        h = (pi_avg[:b] - ref_avg[:b]) - (pi_avg[b:] - ref_avg[b:])
        return ((h - 1 / (2 * beta)) ** 2).mean()
    if kind == "simpo":
        return F.softplus(-(beta * (pi_avg[:b] - pi_avg[b:]) - GAMMA)).mean()
    nll = -pi[:b].sum() / count[:b].sum()
    odds = pi_avg - torch.log(1 - torch.exp(pi_avg))
    return nll + beta * F.softplus(-(odds[:b] - odds[b:])).mean()


def raw_rows(
    seed: int, n: int, vocab: int = 320, prompt: tuple = (4, 9), completion: tuple = (3, 10)
) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(seed)

    def draw(lo: int, hi: int) -> list[int]:
        size = int(torch.randint(lo, hi, (1,), generator=g))
        return torch.randint(3, vocab, (size,), generator=g).tolist()

    return [(draw(*prompt), draw(*completion)) for _ in range(n)]


def seq(prompt: list[int], completion: list[int]) -> TokenSeq:
    return TokenSeq(tuple(prompt + completion), (False,) * len(prompt) + (True,) * len(completion))


def pair_batch(seed: int, pairs: int = 3, **shape):
    """A preference Batch, plus (prompt, completion) for every row (chosen rows first)."""
    prompts = raw_rows(seed, pairs, **shape)
    rejected = raw_rows(seed + 100, pairs, **shape)
    rows = [(p, c) for p, c in prompts] + [
        (p, r) for (p, _), (_, r) in zip(prompts, rejected, strict=True)
    ]
    examples = [Example(i, (seq(*rows[i]), seq(*rows[pairs + i]))) for i in range(pairs)]
    return collate(examples, pad_id=0), rows


def kto_batch(seed: int, n: int = 4):
    rows = raw_rows(seed, n)
    labels = [i % 2 == 0 for i in range(n)]
    examples = [Example(i, (seq(*rows[i]),), labels[i]) for i in range(n)]
    return collate(examples, pad_id=0), rows, torch.tensor(labels)
