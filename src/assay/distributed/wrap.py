"""Wrapping a model for data parallelism (DDP) or sharding (FSDP2), and the byte probe.

The objective calls ``model.hidden_states(...)``, never ``forward``. Both wrappers therefore
make ``hidden_states`` the entry point torch hooks into:

- DDP arms its gradient reducer in ``forward``; :class:`DDPRunner` routes ``hidden_states``
  through ``DistributedDataParallel.forward``. Only trainable tensors are registered with DDP:
  frozen base tensors (resident, NF4 buffers, or a streamed store's views and meta
  placeholders) are ignored, so they are neither broadcast nor reduced. The LM head runs
  outside that forward; its gradient (when it trains) is still reduced, because DDP's hooks
  sit on the parameters' gradient accumulators.
- FSDP2 hooks ``forward`` of every module it shards; :func:`shard` also registers
  ``hidden_states`` with ``register_fsdp_forward_method`` so the root's parameters are
  gathered for it.

Both reduce gradients by their mean over ranks (torch's default); the trainer scales each
rank's loss by the world size so that the mean equals the gradient of the single-process
run over the union of the ranks' rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from assay.distributed.context import DistContext

if TYPE_CHECKING:
    from torch.distributed.fsdp import FSDPModule

    from assay.model.decoder import Decoder
    from assay.stream import StreamedModel

STRATEGIES = ("ddp", "fsdp")


class _HiddenStates(nn.Module):
    """``forward`` = the wrapped runner's ``hidden_states`` (what DDP needs to see)."""

    def __init__(self, runner: Decoder | StreamedModel) -> None:
        super().__init__()
        self.runner = runner

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.runner.hidden_states(input_ids, attention_mask)


class DDPRunner:
    """A resident Decoder or a StreamedModel under DistributedDataParallel.

    Guarantee: after the backward of the last micro-batch of a step (outside
    :meth:`no_sync`), every trainable ``.grad`` on every rank holds the mean of the ranks'
    gradients. Streaming composes: each rank streams its own base; DDP sees only the
    resident trainables, whose gradients the stream engine's backward returns as usual.
    """

    def __init__(self, runner: Decoder | StreamedModel, context: DistContext) -> None:
        from torch.nn.parallel import DistributedDataParallel

        self.runner = runner
        module = _HiddenStates(runner)
        frozen = [n for n, p in module.named_parameters() if not p.requires_grad]
        frozen += [n for n, _ in module.named_buffers()]
        # Frozen tensors are identical on every rank by construction (same file, same seed);
        # registering them would broadcast the whole base, or fail on a disk tier's meta
        # placeholders.
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(module, frozen)
        cuda = context.device.startswith("cuda")
        # Every buffer is ignored above, so DDP has none to broadcast in forward.
        self.ddp = DistributedDataParallel(
            module, device_ids=[torch.device(context.device)] if cuda else None
        )

    def hidden_states(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if position_ids is not None:
            raise ValueError(
                "position_ids are not routed through DDP: the objective never passes them, so "
                "a caller that does would be computing something training does not"
            )
        return self.ddp(input_ids, attention_mask)

    def no_sync(self) -> contextlib.AbstractContextManager[None]:
        """Accumulate gradients locally (no all-reduce) inside the block."""
        return self.ddp.no_sync()


def shard(base: Decoder, context: DistContext) -> Decoder:
    """FSDP2 ``fully_shard`` over each decoder layer, then the root; returns ``base``.

    Every parameter, frozen or trainable, becomes a DTensor sharded on dim 0 over a 1-D mesh
    of all ranks. Layers are gathered one at a time in forward and again in backward
    (reshard after forward); the root (embeddings, final norm, tied head) stays gathered
    from its forward until its backward, as FSDP2 does by default.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    device_type = torch.device(context.device).type
    mesh = init_device_mesh(device_type, (context.world_size,))
    for layer in base.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(base, mesh=mesh)
    register_fsdp_forward_method(base, "hidden_states")
    return base


@contextlib.contextmanager
def fsdp_no_sync(base: nn.Module) -> Iterator[None]:
    """FSDP2's counterpart of DDP's ``no_sync``: keep unsharded gradients, no reduce-scatter."""
    # ``shard`` made ``base`` an FSDPModule (fully_shard swaps the module's class)
    cast("FSDPModule", base).set_requires_gradient_sync(False)
    try:
        yield
    finally:
        cast("FSDPModule", base).set_requires_gradient_sync(True)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def local_base_bytes(model: nn.Module) -> int:
    """Bytes of the frozen base that THIS process holds: every frozen parameter and every
    buffer (so also frozen adapter tensors such as LoRA-FA's A, when present), counting a
    DTensor by its local shard (``to_local()``).

    It reads what is allocated here and never divides by the world size, so an unsharded
    model reports its full size at any world size. Shared tensors count once. Call it between
    steps: FSDP2 keeps the root gathered from its forward to its backward.
    """
    seen: set[int] = set()
    total = 0
    frozen = [p for p in model.parameters() if not p.requires_grad]
    for tensor in [*frozen, *model.buffers()]:
        local = _local(tensor)
        if local.device.type == "meta":
            continue  # a disk-streamed placeholder holds no bytes
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        total += local.numel() * local.element_size()
    return total


def full_base_bytes(model: nn.Module) -> int:
    """Bytes of the whole frozen base by global shape (shared tensors once): the unsharded
    count that :func:`local_base_bytes` summed over ranks must equal."""
    seen: set[int] = set()
    total = 0
    frozen = [p for p in model.parameters() if not p.requires_grad]
    for tensor in [*frozen, *model.buffers()]:
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        total += tensor.numel() * tensor.element_size()
    return total
