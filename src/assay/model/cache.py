"""A key/value cache for incremental decoding, and the attention mask it needs.

The cache holds each layer's keys and values *before* grouped-query repetition, shape
[B, kv_heads, T, head_dim], and grows along T. Training never builds one: with ``cache=None``
the decoder runs exactly the code it always did.
"""

from __future__ import annotations

import torch


class LayerCache:
    """One layer's keys and values so far; ``extend`` appends and returns the whole run."""

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys is None or self.values is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat((self.keys, k), dim=2)
            self.values = torch.cat((self.values, v), dim=2)
        return self.keys, self.values


class KVCache:
    """Per-layer caches plus how many positions they hold (the same for every layer)."""

    def __init__(self, num_layers: int) -> None:
        self.layers = [LayerCache() for _ in range(num_layers)]
        self.length = 0


def cached_attention_mask(
    window: int | None, past: int, new: int, padding: torch.Tensor, device: torch.device
) -> torch.Tensor:
    """Boolean [B, 1, new, past + new] (True = attend) for ``new`` queries after ``past`` keys.

    Query i sits at absolute index past + i and sees key j when j <= past + i, the key is not
    padding (``padding`` is [B, past + new], 1 = real token), and, for a sliding ``window``,
    when past + i - j < window. Every query also sees itself, so a padded query row is never
    empty.
    """
    total = past + new
    query = torch.arange(past, total, device=device)[:, None]
    key = torch.arange(total, device=device)[None, :]
    allowed = key <= query
    if window is not None:
        allowed = allowed & (query - key < window)
    allowed = allowed[None, None] & padding.bool()[:, None, None, :]
    return allowed | (key == query)[None, None]
