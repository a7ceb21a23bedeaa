"""Timing one optimizer step of several subjects, interleaved, against a same-session GEMM rate.

A step is what a trainer does per batch: forward, next-token cross-entropy over the shifted
labels, backward, AdamW step, zero_grad. The loss is ``ce`` (full-vocabulary fp32 logits,
then F.cross_entropy: what transformers does) or ``chunked_ce`` (assay's fused chunked CE over
the hidden states, as ``assay train`` runs with ``loss: {type: chunked_ce}``). Rounds run
every (subject, sequence length) once, in an order that rotates each round, so machine drift
hits all subjects alike; the first ``warmup`` rounds are discarded. Each round also times one
fp32 ``n x n x n`` matmul (assay_bench.gemm): the ceiling is the median of those. Nothing here
asserts a speed; gates and harnesses judge the numbers.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from assay.model.flops import step_flops
from assay_bench.gemm import gemm_seconds, gflops, sync

CEILING_N = 2048


@dataclass
class Subject:
    """One contestant: ``model(ids) -> logits`` (or ``forward(ids)`` when given); ``setup()``
    runs before each of its steps (e.g. switching gradient checkpointing on a model shared
    with another subject)."""

    name: str
    description: str
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    config: Any
    lora_rank: int | None = 8
    lora_targets: str | Sequence[str] = "attention"
    recompute: bool = False
    setup: Callable[[], None] = field(default=lambda: None)
    forward: Callable[[torch.Tensor], torch.Tensor] | None = None
    loss: str = "ce"
    precision: str = "float32"

    def loss_of(self, ids: torch.Tensor) -> torch.Tensor:
        return step_loss(self.model, ids, self.loss, self.forward, self.precision)

    def flops(self, batch: int, seq: int):
        """The FLOP model of one step (assay.model.flops) for this subject's arithmetic."""
        return step_flops(
            self.config,
            batch=batch,
            seq=seq,
            lora_rank=self.lora_rank,
            lora_targets=self.lora_targets,
            recompute=self.recompute,
        )


LOSSES = ("ce", "chunked_ce")
LOSS_RANGE = "assay_bench.loss"  # profiler range around the loss: category cross_entropy


def next_token_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Mean CE of position t predicting token t + 1, on fp32 logits."""
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())


def step_loss(
    model: torch.nn.Module,
    ids: torch.Tensor,
    kind: str = "ce",
    forward: Callable[[torch.Tensor], torch.Tensor] | None = None,
    precision: str = "float32",
) -> torch.Tensor:
    """The step's mean next-token loss: ``ce`` on ``forward(ids)`` (default ``model(ids)``)
    logits, or ``chunked_ce`` on ``model.hidden_states(ids)`` and the head weight. With
    ``precision`` bf16 the forward (``ce``) or the hidden states (``chunked_ce``) run under
    bf16 autocast; the loss itself is fp32."""
    from torch.profiler import record_function

    autocast = torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    if kind == "ce":
        with autocast:
            logits = model(ids) if forward is None else forward(ids)
        with record_function(LOSS_RANGE):
            return next_token_loss(logits, ids)
    if kind != "chunked_ce":
        raise ValueError(f"loss {kind!r} is not one of {LOSSES}")
    from assay.train.losses import chunked_cross_entropy
    from assay.train.objective import head_weight

    with autocast:
        hidden = model.hidden_states(ids)
    with record_function(LOSS_RANGE):
        labels = ids[:, 1:]
        scored = torch.ones_like(labels, dtype=torch.bool)
        return chunked_cross_entropy(hidden[:, :-1], head_weight(model), labels, scored)


def train_step(subject: Subject, ids: torch.Tensor) -> tuple[float, float]:
    """One optimizer step; returns (seconds, loss). ``setup`` runs outside the timed region."""
    subject.setup()
    sync(ids.device)
    started = time.perf_counter()
    loss = subject.loss_of(ids)
    loss.backward()
    subject.optimizer.step()
    subject.optimizer.zero_grad(set_to_none=True)
    sync(ids.device)
    return time.perf_counter() - started, float(loss.detach())


@dataclass
class Run:
    subject: Subject
    seq: int


def interleaved(
    runs: Sequence[Run],
    ids: dict[int, torch.Tensor],
    *,
    steps: int,
    warmup: int,
    ceiling_n: int = CEILING_N,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[dict[tuple[str, int], list[float]], list[float], dict[tuple[str, int], list[float]]]:
    """Time ``warmup + steps`` rounds; returns (seconds per (name, seq), ceiling GFLOP/s
    samples, losses per (name, seq)), warm-up rounds dropped."""
    device = next(iter(ids.values())).device
    ceiling = gemm_seconds(ceiling_n, ceiling_n, ceiling_n, device)
    ceiling(), ceiling()
    times: dict[tuple[str, int], list[float]] = {(r.subject.name, r.seq): [] for r in runs}
    losses: dict[tuple[str, int], list[float]] = {key: [] for key in times}
    rates: list[float] = []
    total = warmup + steps
    for round_ in range(total):
        tag = "warm-up" if round_ < warmup else "timed"
        shift = round_ % len(runs)
        for run in [*runs[shift:], *runs[:shift]]:
            seconds, loss = train_step(run.subject, ids[run.seq])
            progress(
                f"round {round_ + 1}/{total} ({tag}) {run.subject.name} seq {run.seq}: "
                f"{seconds:.3f} s"
            )
            if round_ >= warmup:
                times[(run.subject.name, run.seq)].append(seconds)
                losses[(run.subject.name, run.seq)].append(loss)
        rate = gflops(2 * ceiling_n**3, ceiling())
        if round_ >= warmup:
            rates.append(rate)
    return times, rates, losses


def ratio(numerator: float, denominator: float) -> float:
    if denominator <= 0:
        raise ValueError(f"ratio denominator must be positive, got {denominator}")
    return numerator / denominator


def median_step(samples: Sequence[float], minimum: int = 5) -> float:
    """Median of at least ``minimum`` timed steps (fewer is an error, never a quiet number)."""
    if len(samples) < minimum:
        raise ValueError(f"need at least {minimum} timed steps, got {len(samples)}")
    return statistics.median(samples)


def subject_result(
    subject: Subject, seq: int, batch: int, samples: Sequence[float], ceilings: Sequence[float]
) -> dict[str, Any]:
    """Median step, tokens/s, FLOP model, achieved GFLOP/s and fraction of the ceiling.

    ``ceilings`` are the GEMM rates of the same rounds as ``samples`` (one each): the fraction
    is the median over rounds of (achieved rate / that round's ceiling), so drift between
    rounds cancels; ``ceiling_fraction_of_medians`` divides the two medians instead.
    """
    if len(ceilings) != len(samples):
        raise ValueError(f"{len(samples)} steps but {len(ceilings)} ceiling samples")
    median = median_step(samples)
    flops = subject.flops(batch, seq)
    achieved = gflops(flops.model, median)
    fractions = [gflops(flops.model, t) / c for t, c in zip(samples, ceilings, strict=True)]
    return {
        "seq": seq,
        "samples_s": list(samples),
        "median_s": median,
        "tokens_per_s": batch * seq / median,
        "flops": flops.to_dict(),
        "gflops": achieved,
        "ceiling_fraction": statistics.median(fractions),
        "ceiling_fraction_samples": fractions,
        "ceiling_fraction_of_medians": achieved / statistics.median(ceilings),
    }


def paired_ratios(numerator: Sequence[float], denominator: Sequence[float]) -> list[float]:
    """Round-by-round ``numerator / denominator`` of two subjects' step times (same rounds)."""
    if len(numerator) != len(denominator):
        raise ValueError(f"unpaired samples: {len(numerator)} and {len(denominator)}")
    return [ratio(a, b) for a, b in zip(numerator, denominator, strict=True)]


def trainable_grads(
    model: torch.nn.Module, ids: torch.Tensor, prefix: str = "", loss: str = "ce"
) -> dict[str, torch.Tensor]:
    """{trainable name (``prefix`` removed): gradient} after one backward of the step's loss."""
    named = [(n.removeprefix(prefix), p) for n, p in model.named_parameters() if p.requires_grad]
    loss = step_loss(model, ids, loss)
    grads = torch.autograd.grad(loss, [p for _, p in named])
    return {n: g.detach() for (n, _), g in zip(named, grads, strict=True)}


def max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Largest |a - b| over tensors with the same names (names must agree)."""
    if a.keys() != b.keys():
        raise ValueError(f"gradient names differ: {sorted(a.keys() ^ b.keys())[:4]}")
    return max(float((a[k] - b[k]).abs().max()) for k in a)
