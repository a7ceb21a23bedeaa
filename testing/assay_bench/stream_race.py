"""Streamed against resident on one device, with the compute optionally stalled per layer.

On CUDA the copy stream fills a slot while kernels that read its previous layer may still be
queued; the pool orders the copy after the slot's release event. Stalling the compute stream
at every layer (``torch.cuda._sleep``) lets the host run far ahead, so a missing wait (the defect
``stream.pool.skip_release_wait``) shows as wrong logits or gradients. On CPU the same
function compares the threaded prefetch path, where no stall is possible.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

VOCAB = 49152


def _pair(layers: int):
    from assay.adapters import attach
    from assay.adapters.perturb import randomize_adapters
    from assay_testing.tiny import smollm2_shaped

    def build():
        model = smollm2_shaped(layers, seed=1)
        attach(model, "lora", rank=8, alpha=16, targets="all-linear")
        return randomize_adapters(model, seed=2)

    return build(), build()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _outputs(runner, params, ids) -> list[torch.Tensor]:
    logits = runner(ids[:, :-1])
    F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten()).backward()
    _sync(ids.device)
    out = [logits.detach().float().cpu(), *(p.grad.detach().float().cpu() for p in params)]
    for p in params:
        p.grad = None
    return out


def _relative(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    return max(
        float((g - w).abs().max() / w.abs().max().clamp_min(1e-30))
        for g, w in zip(got, want, strict=True)
    )


def stream_errors(
    device: str | torch.device,
    *,
    layers: int = 6,
    seq: int = 512,
    stall_cycles: int = 0,
    faults: tuple[str, ...] = (),
) -> dict[str, float]:
    """Max relative error of streamed (2 slots) logits and LoRA grads against resident, first
    as the engine runs, then with each named defect injected: ``{"clean": e, fault: e...}``.

    ``stall_cycles`` > 0 (CUDA only) sleeps the compute stream that long at every layer.
    """
    from assay.stream import StreamedModel
    from assay_testing import defects

    dev = torch.device(device)
    resident, base = _pair(layers)
    resident.to(dev)
    streamed = StreamedModel(base, buffers=2, device=dev)
    if stall_cycles:
        for layer in base.layers:
            layer.register_forward_pre_hook(lambda *_: torch.cuda._sleep(stall_cycles))
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, VOCAB, (2, seq + 1), generator=gen).to(dev)
    want = _outputs(resident, [p for p in resident.parameters() if p.requires_grad], ids)
    trainable = [p for p in base.parameters() if p.requires_grad]
    errors = {"clean": _relative(_outputs(streamed, trainable, ids), want)}
    for name in faults:
        with defects.inject(name):
            errors[name] = _relative(_outputs(streamed, trainable, ids), want)
    return errors
