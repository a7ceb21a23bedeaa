"""The NF4 stale-gradient defect class: bitsandbytes ``matmul_4bit`` backward through recycled
slot buffers.

``bnb.matmul_4bit`` (``MatMul4Bit``) keeps a reference to the packed weight it was given in its
autograd context and dequantizes it again in backward. If that packed weight is a view of a
streaming slot that is overwritten with a later layer's bytes before backward runs, backward
silently uses the wrong layer's weight: wrong gradients, no error. The safe protocol, which
assay's streaming engine follows, recomputes each layer in backward after fetching that
layer's bytes into its slot again.

``slot_grad_error`` runs a small residual stack of NF4 projections three ways on ``device``:
private buffers (the reference), recycled slots with the re-fetch protocol, and recycled slots
without it (the defect), and reports the input-gradient error against the reference.
"""

from __future__ import annotations

import torch

PROTOCOLS = ("refetch", "recycled")


def _stack(device: torch.device, layers: int, dim: int, seed: int):
    import bitsandbytes.functional as bnbf

    gen = torch.Generator().manual_seed(seed)
    packed, states = [], []
    for _ in range(layers):
        weight = (torch.randn(dim, dim, generator=gen) * dim**-0.5).to(device, torch.bfloat16)
        code, state = bnbf.quantize_4bit(weight, quant_type="nf4", blocksize=64)
        packed.append(code)
        states.append(state)
    x = torch.randn(4, 16, dim, generator=gen).to(device, torch.bfloat16)
    return packed, states, x


def _layer(x: torch.Tensor, code: torch.Tensor, state) -> torch.Tensor:
    import bitsandbytes as bnb

    # Linear4bit's call: the packed weight transposed, its quant state alongside.
    return x + torch.nn.functional.gelu(bnb.matmul_4bit(x, code.t(), quant_state=state))


def _input_grad_private(packed, states, x0) -> torch.Tensor:
    x = x0.clone().requires_grad_(True)
    h = x
    for code, state in zip(packed, states, strict=True):
        h = _layer(h, code, state)
    h.float().square().mean().backward()
    return x.grad.float()


def _input_grad_slots(packed, states, x0, slots: int, refetch: bool) -> torch.Tensor:
    buffers = [torch.empty_like(packed[0]) for _ in range(slots)]

    def fetch(i: int) -> torch.Tensor:
        buffers[i % slots].copy_(packed[i])
        return buffers[i % slots]

    x = x0.clone().requires_grad_(True)
    if not refetch:  # the defect: autograd keeps slot views that later layers overwrite
        h = x
        for i, state in enumerate(states):
            h = _layer(h, fetch(i), state)
        h.float().square().mean().backward()
        return x.grad.float()
    inputs = []
    with torch.no_grad():
        h = x0
        for i, state in enumerate(states):
            inputs.append(h)
            h = _layer(h, fetch(i), state)
    grad = (2 * h.float() / h.numel()).to(h.dtype)  # d mean(h^2) / dh
    for i in reversed(range(len(states))):
        inp = inputs[i].detach().requires_grad_(True)
        out = _layer(inp, fetch(i), states[i])  # recompute with this layer's bytes in the slot
        out.backward(grad)
        grad = inp.grad
    return grad.float()


def slot_grad_error(
    device: str | torch.device,
    protocol: str,
    *,
    layers: int = 6,
    slots: int = 2,
    dim: int = 256,
    seed: int = 0,
) -> float:
    """max |grad - reference| / max |reference| of the stack's input gradient, where the
    reference uses a private packed buffer per layer and ``protocol`` is ``refetch`` (recycled
    slots, each layer fetched again and recomputed in backward) or ``recycled`` (the defect)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if layers <= slots:
        raise ValueError("layers must exceed slots, or no slot is ever recycled")
    dev = torch.device(device)
    packed, states, x0 = _stack(dev, layers, dim, seed)
    reference = _input_grad_private(packed, states, x0)
    got = _input_grad_slots(packed, states, x0, slots, refetch=protocol == "refetch")
    return float((got - reference).abs().max() / reference.abs().max())
