"""Greedy decoding: a batch of prompts, left-padded, with a KV cache (or full recompute).

Prompts of different lengths are padded on the LEFT, so every row's next token sits in the
last column; rotary positions count real tokens only (a pad gets position 0), which is what
transformers' ``generate`` does, so each row decodes exactly as it would alone up to fp
rounding. A row stops at its first eos (not included in its tokens) or after
``max_new_tokens``; finished rows keep decoding (ignored) until every row has stopped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from assay.errors import AssayError
from assay.model.cache import KVCache

if TYPE_CHECKING:
    from assay.model.decoder import Decoder


@dataclass(frozen=True)
class Generation:
    """One prompt's greedy continuation: new token ids (no eos) and why it stopped; with
    ``keep_logits``, the float32 logits [steps, vocab] each emitted token (and a stopping eos)
    was chosen from, as transformers' ``output_logits`` gives them."""

    tokens: tuple[int, ...]
    stop: str  # "eos" or "length"
    logits: torch.Tensor | None = None


def _decoder(model: nn.Module) -> Decoder:
    """The Decoder itself, or the one a wrapper (DDP: ``module``) holds; a StreamedModel is
    refused: decode with its resident Decoder instead."""
    for attribute in ("base", "module"):
        inner = getattr(model, attribute, None)
        if isinstance(inner, nn.Module) and hasattr(inner, "forward_cached"):
            return cast("Decoder", inner)
    if not hasattr(model, "forward_cached"):
        raise AssayError(f"generate: {type(model).__name__} is not an assay Decoder")
    return cast("Decoder", model)


def _left_padded(
    prompts: Sequence[Sequence[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
    for row, prompt in enumerate(prompts):
        if prompt:
            ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
            mask[row, width - len(prompt) :] = 1
    return ids, mask


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """Rotary positions from a left-padded mask: real tokens count 0, 1, ...; pads get 0."""
    return (mask.cumsum(-1) - 1).clamp_min(0)


@torch.no_grad()
def generate(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    eos_id: int | Iterable[int] | None,
    pad_id: int = 0,
    use_cache: bool = True,
    keep_logits: bool = False,
) -> list[Generation]:
    """Greedy (argmax, ties to the lowest id) continuations of every prompt, in order.

    ``use_cache=False`` recomputes the whole sequence at every step with the training forward:
    the reference the cached path is tested against. ``keep_logits`` returns each row's logits
    per step (to compare with another implementation, or to score). Raises AssayError on an
    empty prompt list, an empty prompt or a negative ``max_new_tokens``.
    """
    if not prompts:
        raise AssayError("generate: no prompts")
    if any(len(p) == 0 for p in prompts):
        raise AssayError("generate: a prompt is empty (it needs at least one token)")
    if max_new_tokens < 0:
        raise AssayError(f"generate: max_new_tokens {max_new_tokens} is negative")
    decoder = _decoder(model)
    # the final norm is dense in every storage; a stored embedding holds no weight to ask
    device = decoder.norm.weight.device
    stops = set() if eos_id is None else {eos_id} if isinstance(eos_id, int) else set(eos_id)
    ids, mask = _left_padded(prompts, pad_id, device)
    rows = len(prompts)
    out: list[list[int]] = [[] for _ in range(rows)]
    done = [False] * rows
    stop = ["length"] * rows
    kept: list[list[torch.Tensor]] = [[] for _ in range(rows)]
    cache = KVCache(len(decoder.layers)) if use_cache else None
    step_ids, positions = ids, _positions(mask)
    for _ in range(max_new_tokens):
        if cache is not None:
            logits = decoder.forward_cached(step_ids, cache, mask, positions)[:, -1]
        else:
            logits = decoder(ids, attention_mask=mask, position_ids=_positions(mask))[:, -1]
        chosen = logits.argmax(-1)
        for row in range(rows):
            if done[row]:
                continue
            if keep_logits:
                kept[row].append(logits[row].float())
            token = int(chosen[row])
            if token in stops:
                done[row], stop[row] = True, "eos"
            else:
                out[row].append(token)
        if all(done):
            break
        # Rows are independent, so what a finished row is fed cannot change the others.
        fed = chosen.to(torch.long)
        ids = torch.cat((ids, fed[:, None]), dim=1)
        mask = torch.cat((mask, torch.ones((rows, 1), dtype=mask.dtype, device=device)), dim=1)
        step_ids, positions = fed[:, None], _positions(mask)[:, -1:]
    return [
        Generation(tuple(tokens), s, torch.stack(steps) if steps else None)
        for tokens, s, steps in zip(out, stop, kept, strict=True)
    ]
