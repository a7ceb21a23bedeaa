"""The runner interface: what the training objective calls on a model.

The objective never calls ``forward``: it asks a runner for the LM head's input and applies
the head itself (chunked CE never builds full logits). Three classes are runners: the resident
``Decoder`` (``model/decoder.py``), the layer-streamed ``StreamedModel`` (``stream/engine.py``)
and the data-parallel and sharded wrappers (``distributed/wrap.py``), which route the call
through the hook torch's wrapper needs. Code that takes any of them annotates it with
:class:`Runner`, so the type checker holds each one to the same call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch


class Runner(Protocol):
    """Computes the final-normed hidden states the LM head reads, differentiably with respect
    to every trainable tensor."""

    def hidden_states(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """[B, T, hidden] for ``input_ids`` [B, T]. ``attention_mask`` [B, T] is 1 on the real
        tokens of each row (None: no padding); ``position_ids`` [B, T] override the default
        0..T-1 (None: the default)."""
        ...
