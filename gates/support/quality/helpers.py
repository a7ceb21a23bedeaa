"""gate-quality's helpers (not a gate module): training and scoring on the keyed task, the
formatting variants and near misses the scorer is gated on, the noise bound between two
held-out scores, the held-out preference accuracy, and the learning-curve figure.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from assay.model.generate import generate
from assay.settings.loader import train_config_from_dict
from assay.train.loop import Trainer
from assay_testing import grader, swap_task
from assay_testing.keyed_task import Item, Split
from assay_testing.real_model import smollm2_path
from assay_testing.swap_task import ADAPTER

LR = 5e-3
NEW_TOKENS = 6
CURVE_EVERY = 10  # steps between the learning curve's points


@dataclass
class Run:
    """One trained model and how it scored."""

    trainer: Trainer
    moved: float  # largest change of any trainable from its initial value
    answers: list[str]
    score: float
    cpu_s: float
    curve: list[tuple[int, float]] = field(default_factory=list)  # (step, held-out score)


def make_trainer(tmp: Path, name: str, rows: Path, steps: int, **over) -> Trainer:
    """A Trainer for SmolLM2 with gate-quality's adapter on ``rows``."""
    config = {
        "model": str(smollm2_path()),
        "adapter": ADAPTER,
        "data": {"train": str(rows), "seq_len": 32},
        "optim": {"lr": over.pop("lr", LR)},
        "batch": {"micro_batch": 8 if over.get("loss") is None else 4},
        "steps": steps,
        "seed": over.pop("seed", 0),
        "output": {"dir": str(tmp / name)},
        **over,
    }
    return Trainer(train_config_from_dict(config, tmp / f"{name}.yaml"), progress=False)


def answers(trainer: Trainer, prompts: list[str]) -> list[str]:
    """Greedy answers to ``prompts``, decoded as one left-padded batch (few-shot prompts differ
    in length, so the padding is exercised)."""
    tok = trainer.tokenizer
    ids = [tok.encode(p, add_special_tokens=True) for p in prompts]
    out = generate(
        trainer.base, ids, max_new_tokens=NEW_TOKENS, eos_id=tok.eos_id, pad_id=trainer.pad_id
    )
    return [tok.decode(g.tokens) for g in out]


def expected(items: tuple[Item, ...]) -> list[str]:
    return [item.answer for item in items]


def train(
    tmp: Path, name: str, rows: Path, split: Split, steps: int, *, curve=False, **over
) -> Run:
    """Train ``steps`` steps and score the held-out prompts (every ``CURVE_EVERY`` steps too
    when ``curve``)."""
    cpu = time.process_time()
    trainer = make_trainer(tmp, name, rows, steps, **over)
    prompts, want = [i.prompt for i in split.held_out], expected(split.held_out)
    start = {n: p.detach().clone() for n, p in trainer.params.items()}
    points = [(0, grader.score(answers(trainer, prompts), want))] if curve else []
    for step in range(1, steps + 1):
        trainer.train_step()
        if curve and step % CURVE_EVERY == 0 and step < steps:
            points.append((step, grader.score(answers(trainer, prompts), want)))
    got = answers(trainer, prompts)
    score = grader.score(got, want)
    points += [(steps, score)] if curve else []
    moved = max(float((p.detach() - start[n]).abs().max()) for n, p in trainer.params.items())
    print(f"[gate-quality] {name}: score {score:.3f}, moved {moved:.3g}", flush=True)
    return Run(trainer, moved, got, score, time.process_time() - cpu, points)


# -- the claims' arithmetic ---------------------------------------------------------------
# two-sided 95% Student t quantiles by degrees of freedom
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def interval_low(values: list[float]) -> tuple[float, float]:
    """(lower end of the two-sided 95% Student t-interval of the mean of ``values``, mean)."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean - T975[n - 1] * sd / math.sqrt(n), mean


def defect_table(claims: list[dict]) -> list[str]:
    """One line per training defect: each headline claim its control fails, with the value."""
    caught: dict[str, list[str]] = {}
    for claim in claims:
        bound = claim["threshold"]["value"]
        for control in claim["controls"]:
            if "with accumulation 4" in control["name"] and control["measured"] > bound:
                caught.setdefault(control["name"], []).append(
                    f"{claim['id']} {control['measured']:.3g} (threshold <= {bound:g})"
                )
    return [f"defect {name} fails {'; '.join(claims)}" for name, claims in caught.items()]


def swap_task_prompted(trainer, seed: int, shots: int = 8) -> float:
    """The swap task's held-out score for the prompted base: the control that shows the
    headroom claim fails for a task learnt from the prompt format alone."""
    split = swap_task.make_split()
    prompts = []
    for item in split.held_out:
        rng = random.Random(f"{seed}:{item.prompt}")
        shown = "".join(f"{e.prompt} {e.answer}\n\n" for e in rng.sample(split.train, shots))
        prompts.append(shown + item.prompt)
    return grader.score(answers(trainer, prompts), [i.answer for i in split.held_out])


# -- the scorer ----------------------------------------------------------------------------
def scorer_cases(held_out: tuple[Item, ...]) -> tuple:
    """The scorer's claims: (id, statement, expected score, unit, (answers, expected), the
    grader defect that controls it or None, that control's label)."""
    want = expected(held_out)
    n = len(want)
    perfect = [f" {a}\n" for a in want]  # what a model emits: leading space, then a newline
    wrong = [item.tempting for item in held_out]
    refusing = ["I'm sorry, but I can't help with that.", ""] * (n // 2)
    rows = (
        (
            "scorer.perfect",
            f"a stub answering all {n} held-out items correctly (as a model would: leading "
            "space, trailing newline) scores 1.0",
            1.0,
            "exact match",
            (perfect, want),
            "testing.grader.raw_compare",
            "grader compares verbatim (no normalisation)",
        ),
        (
            "scorer.wrong",
            "a stub answering in the next key's order (the tempting wrong answer) scores 0",
            0.0,
            "exact match",
            (wrong, want),
            None,
            None,
        ),
        (
            "scorer.refusing",
            "a stub that refuses (a refusal or an empty answer) scores 0",
            0.0,
            "exact match",
            (refusing, want),
            "testing.grader.prefix_match",
            "grader accepts any prefix of the answer",
        ),
    )
    variant_pairs = [(v, w) for w in want for v in variants(w)]
    miss_pairs = [(m, w) for w in want for m in near_misses(w)]
    rows += (
        (
            "scorer.variants",
            f"{len(variant_pairs)} formatting variants of right answers (case, inner/outer "
            "whitespace, trailing . ! , quotes, text after the first line) are accepted",
            1.0,
            "accepted fraction",
            ([v for v, _ in variant_pairs], [w for _, w in variant_pairs]),
            "testing.grader.raw_compare",
            "grader compares verbatim",
        ),
        (
            "scorer.near_misses",
            f"{len(miss_pairs)} near misses (reordered, one word, an extra word, words joined, "
            "empty, a refusal) are rejected",
            0.0,
            "accepted fraction",
            ([m for m, _ in miss_pairs], [w for _, w in miss_pairs]),
            "testing.grader.prefix_match",
            "grader accepts any prefix of the answer",
        ),
    )
    return rows


def variants(answer: str) -> list[str]:
    """Right answers as a model might format them."""
    a, b = answer.split()
    return [
        f" {a} {b}",
        f"{a.title()} {b.title()}",
        f"{a}  {b}.",
        f"{a.upper()} {b.upper()}!",
        f"'{a} {b}'",
        f"{a} {b}\nKey: red",
        f"\n {a} {b} \n",
    ]


def near_misses(answer: str) -> list[str]:
    """Wrong answers close to ``answer``: reordered (where that differs), one word, an extra
    word, joined, empty, a refusal."""
    a, b = answer.split()
    reordered = [f"{b} {a}"] if a != b else []
    return [*reordered, a, f"{a} {b} {a}", f"{a}{b}", "", "I can't help with that."]


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
    """Held-out fraction with log p(answer | prompt) > log p(the next key's order | prompt),
    eos included."""
    wins = [
        _completion_logp(trainer, i.prompt, " " + i.answer)
        > _completion_logp(trainer, i.prompt, " " + i.tempting)
        for i in split.held_out
    ]
    return sum(wins) / len(wins)


# -- the figure ----------------------------------------------------------------------------
def plot_curves(curves: dict[str, list[tuple[int, float]]], prompted: float, out: Path) -> Path:
    """Held-out exact match against training step for each run, with the best prompted base,
    written to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 3.8), dpi=120)
    for label, points in curves.items():
        ax.plot([s for s, _ in points], [v for _, v in points], marker="o", ms=3, label=label)
    ax.axhline(prompted, color="k", ls="--", lw=0.8, label="best prompted base (0/3/8-shot)")
    ax.set_xlabel("optimizer step (8 rows each)")
    ax.set_ylabel("held-out exact match")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out
