"""gate-preference's drivers of the product under test (not a gate module).

The adapted model (LoRA with randomized B), the product objective's loss and gradients, the
control subjects (chosen and rejected swapped, prompt tokens scored) and the comparisons the
claims measure. gate-dynamics' DPO chunk claims drive the product and compare with ``product``,
``trainables`` and ``relative`` (``dynamics/chunked_helpers``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import torch

import assay
from assay.adapters import attach
from assay.adapters.perturb import randomize_adapters
from assay.settings import DataConfig, LossConfig, OutputConfig, TrainConfig
from assay.train.objective import Objective
from support.preference.reference import BETA, GAMMA, kto_batch, pair_batch


def swapped(batch):
    """Control subject: chosen and rejected halves swapped (KTO: labels flipped)."""
    if batch.kto_labels is not None:
        return dataclasses.replace(batch, kto_labels=~batch.kto_labels)
    n = batch.input_ids.shape[0] // 2
    order = torch.cat([torch.arange(n, 2 * n), torch.arange(n)])
    fields = ("input_ids", "attention_mask", "labels", "loss_mask", "lengths")
    return dataclasses.replace(batch, **{f: getattr(batch, f)[order] for f in fields})


def leaky(batch):
    """Control subject: every real next token scored, prompt included (a masking bug)."""
    keep = torch.zeros_like(batch.loss_mask)
    keep[:, :-1] = batch.attention_mask[:, 1:].bool()
    return dataclasses.replace(batch, loss_mask=keep)


# -- the product under test --------------------------------------------------------------------
def adapted(path: Path, storage: str = "float32", seed: int = 3):
    model = assay.load(path, storage=storage)
    attach(model, "lora", rank=4, alpha=8, targets="all-linear")
    return randomize_adapters(model, seed=seed)


def objective(model, base, kind: str, variant: str, smoothing: float, **kwargs) -> Objective:
    if kind == "chunked_ce":
        loss = LossConfig(type=kind, chunk_size=1024)
    else:
        loss = LossConfig(
            type=kind,
            beta=BETA[kind],
            gamma=GAMMA if kind == "simpo" else None,
            dpo_variant=variant if kind == "dpo" else None,
            label_smoothing=smoothing if kind == "dpo" else None,
        )
    config = TrainConfig(
        model="unused", data=DataConfig(train="unused"), steps=1, output=OutputConfig("unused")
    )
    return Objective(dataclasses.replace(config, loss=loss), model, base, **kwargs)


def trainables(base) -> dict[str, torch.Tensor]:
    return {n: p for n, p in base.named_parameters() if p.requires_grad}


def product(model, base, spec, batch, *, backward_ctx=contextlib.nullcontext, **kwargs):
    """(loss, {name: grad or None}) from the product objective."""
    for p in trainables(base).values():
        p.grad = None
    obj = objective(model, base, *spec[1:], **kwargs)
    loss = obj.loss(batch, obj.normaliser(batch), 1.0)
    with backward_ctx():
        loss.backward()
    return loss.detach(), {n: p.grad for n, p in trainables(base).items()}


def relative(a: dict, b: dict) -> float:
    """Largest per-tensor max|a - b| / max|b|; a missing gradient counts as 1."""
    worst = 0.0
    for name, ref in b.items():
        got = a.get(name)
        if got is None:
            return 1.0
        worst = max(worst, float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30)))
    return worst


def inputs(spec, seed):
    if spec[1] == "kto":
        batch, rows, labels = kto_batch(seed)
        return batch, rows, labels
    batch, rows = pair_batch(seed)
    return batch, rows, None


def unequal(a: tuple, b: tuple) -> int:
    count = int(not torch.equal(a[0], b[0]))
    for name, g in b[1].items():
        other = a[1].get(name)
        count += int(other is None or g is None or not torch.equal(other, g))
    return count


def static_bytes(*models) -> int:
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for m in models
        for t in [*m.parameters(), *m.buffers()]
    }
    return sum(storages.values())
