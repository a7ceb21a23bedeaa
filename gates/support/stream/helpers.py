"""Helpers for gate-stream (not a gate module): adapted resident and streamed runs, the
recycled-slot control pool, loss curves, depth peaks and the delayed-copy comparisons.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch
import torch.nn.functional as F

import assay
from assay.adapters import attach
from assay.adapters.perturb import randomize_adapters
from assay.stream import SlotPool, StreamedModel
from assay.stream.layout import base_tensors


class RecycledSlotPool(SlotPool):
    """Control subject: skips fetch, wait and owner check in the chosen pass (or both)."""

    recycle_forward = False
    recycle_backward = True

    def use(self, layer, next_layer=None):
        backward = torch.is_grad_enabled()
        if (backward and self.recycle_backward) or (not backward and self.recycle_forward):
            return self._stale(layer)
        return super().use(layer, next_layer)

    @contextlib.contextmanager
    def _stale(self, layer):
        slot = max(self.slots, key=lambda s: s.last_used)
        yield self.layouts[layer].views(slot.buffer)


def recycled(streamed: StreamedModel, *, forward: bool, backward: bool) -> StreamedModel:
    streamed.pool.__class__ = RecycledSlotPool
    streamed.pool.recycle_forward, streamed.pool.recycle_backward = forward, backward
    return streamed


def adapted(path, method: str, storage: str, options: dict, seed: int = 3):
    model = assay.load(path, storage=storage)
    attach(model, method, rank=4, alpha=8, targets="all-linear", **options)
    return randomize_adapters(model, seed=seed)


def loss_of(model, ids: torch.Tensor) -> torch.Tensor:
    logits = model(ids)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())


def forward_backward(model, ids: torch.Tensor):
    """Logits and {trainable name: gradient} after one backward of the next-token loss."""
    ids = ids.to(next(model.parameters()).device)
    logits = model(ids)
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    named = [(n.removeprefix("model."), p) for n, p in model.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [p for _, p in named])
    return logits.detach().cpu(), {n: g.cpu() for (n, _), g in zip(named, grads, strict=True)}


def mismatches(a: dict, b: dict) -> int:
    assert a.keys() == b.keys()
    return sum(not torch.equal(a[k], b[k]) for k in a)


def loss_curve(model, steps: int, ids: torch.Tensor) -> list[float]:
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    curve = []
    for step in range(steps):
        batch = ids[step % len(ids)][None]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(model, batch)
        loss.backward()
        optimizer.step()
        curve.append(loss.item())
    return curve


def random_decoder(layers: int, seed: int = 0):
    """SmolLM2's architecture at any depth, with randomized LoRA r8 on attention."""
    from assay_testing.tiny import smollm2_shaped

    model = attach(smollm2_shaped(layers, seed), "lora", rank=8, alpha=16, targets="attention")
    return randomize_adapters(model, seed=seed)


def tensor_bytes(tensors) -> int:
    unique = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for t in tensors
        if t.device.type != "meta"
    }
    return sum(unique.values())


def device_peak(layers: int, streamed: bool, ids: torch.Tensor) -> int:
    """Static device bytes counted from the tensors + the profiler's peak over one step."""
    from assay.memory.peak import measure_peak

    model = random_decoder(layers)
    if streamed:
        model = StreamedModel(model, tier="ram", buffers=2)
        host = {id(t) for layer in model.layers for t in base_tensors(layer).values()}
        resident = [t for t in [*model.parameters(), *model.buffers()] if id(t) not in host]
        static = tensor_bytes(resident) + model.pool.device_bytes
    else:
        static = tensor_bytes([*model.parameters(), *model.buffers()])

    def step():
        loss_of(model, ids).backward()

    _, peak = measure_peak(step)
    return static + peak.peak_bytes


def plot_depth(depths, streamed, resident) -> Path:
    import tempfile

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=120)
    ax.plot(depths, [resident[d] / 2**20 for d in depths], "o-", label="resident")
    ax.plot(depths, [streamed[d] / 2**20 for d in depths], "s-", label="streamed, 2 buffers")
    ax.set_xlabel("decoder layers")
    ax.set_ylabel("device peak (MiB)")
    ax.set_xticks(depths)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(tempfile.mkdtemp()) / "stream-depth.png"
    fig.savefig(out)
    plt.close(fig)
    return out


# "late": a prefetched copy lands after the next layer has started (a skipped wait reads stale
# bytes); "early": copies land while the layer that issued them still computes (a busy slot
# overwritten corrupts that layer).
PROFILES = {
    "late": {"min_delay_s": 0.002, "max_delay_s": 0.008},
    "early": {"min_delay_s": 0.0, "max_delay_s": 0.002},
}


def delayed_mismatches(
    path,
    method: str,
    storage: str,
    reference,
    ids,
    *,
    buffers: int = 2,
    engine_seed: int = 0,
    profile: str = "late",
    fault: str | None = None,
    delaying: bool = True,
    refused: list | None = None,
    wrong_forward: list | None = None,
) -> int:
    """Unequal tensors (logits + gradients) of a streamed run against ``reference``.

    A no-grad forward runs first, and whether its logits are wrong is appended to
    ``wrong_forward`` (wrong numbers, not an error). A forward and backward stopped by the
    pool's owner check (StreamError) or by autograd's in-place check on a slot view
    (RuntimeError) counts every tensor as unequal and is appended to ``refused``.
    """
    from assay.stream.pool import StreamError
    from assay_testing import defects
    from assay_testing.copies import DelayingCopies

    logits, grads = reference
    streamed = StreamedModel(adapted(path, method, storage, {}), buffers=buffers)
    if delaying:
        streamed.pool.set_copy_engine(DelayingCopies(engine_seed, **PROFILES[profile]))
    armed = defects.inject(fault) if fault else contextlib.nullcontext()
    with armed:
        with torch.no_grad():
            forward_only = streamed(ids)
        if wrong_forward is not None:
            wrong_forward.append(int(not torch.equal(forward_only, logits)))
        try:
            s_logits, s_grads = forward_backward(streamed, ids)
        except (StreamError, RuntimeError) as error:
            if refused is not None:
                refused.append(type(error).__name__)
            return 1 + len(grads)
    return int(not torch.equal(logits, s_logits)) + mismatches(grads, s_grads)
