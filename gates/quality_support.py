"""gate-quality's scoring helpers (not a gate module): the formatting variants and near
misses the scorer is gated on, the noise bound between two held-out scores, and the held-out
preference accuracy of a trained model.
"""

from __future__ import annotations

import math

import torch

from assay.train.loop import Trainer
from assay_testing.swap_task import Split


def sampling_noise(a: float, b: float, n: int) -> float:
    """Two standard errors of the difference of two held-out scores on ``n`` items each, at
    their pooled rate: how far two equally good models drift apart by which items they happen
    to miss (0.058 for 1.0 against 0.958 on 48 items)."""
    p = (a + b) / 2
    return 2 * math.sqrt(2 * p * (1 - p) / n)


# -- the scorer ----------------------------------------------------------------------------
def _variants(answer: str) -> list[str]:
    a, b = answer.split()
    return [
        f" {a} {b}",
        f"{a.title()} {b.title()}",
        f"{a}  {b}.",
        f"{a.upper()} {b.upper()}!",
        f"'{a} {b}'",
        f"{a} {b}\nInput: x y",
        f"\n {a} {b} \n",
    ]


def _near_misses(answer: str) -> list[str]:
    a, b = answer.split()
    return [f"{b} {a}", a, f"{a} {b} {a}", f"{a}{b}", "", "I can't help with that."]


# -- preference (DPO) ----------------------------------------------------------------------
def _completion_logp(trainer: Trainer, prompt: str, completion: str) -> float:
    tok = trainer.tokenizer
    head = tok.encode(prompt, add_special_tokens=True)
    tail = [*tok.encode(completion), tok.eos_id]
    ids = torch.tensor([head + tail])
    with torch.no_grad():
        logp = trainer.base(ids).log_softmax(-1)[0, len(head) - 1 : -1]
    return float(logp.gather(-1, torch.tensor(tail)[:, None]).sum())


def preference_accuracy(trainer: Trainer, split: Split) -> float:
    """Held-out fraction with log p(swap | prompt) > log p(copy | prompt), eos included."""
    wins = [
        _completion_logp(trainer, i.prompt, " " + i.answer)
        > _completion_logp(trainer, i.prompt, " " + i.unswapped)
        for i in split.held_out
    ]
    return sum(wins) / len(wins)
