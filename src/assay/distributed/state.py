"""Sharded training state <-> the full, world-size-free state a checkpoint holds.

A checkpoint always holds full (unsharded) trainables and optimizer state, keyed by name, in
the single-process format of :mod:`assay.train.checkpoint.directory`; that is what lets it resume at
any world size. Under DDP the live tensors already are full. Under FSDP2 they are DTensors:

- :func:`gather` makes full copies (a collective: every rank must call it) and an optimizer
  of the same class holding full state, for ``save_checkpoint`` to write from rank 0;
- :func:`restore_sharded` loads a checkpoint into full scratch tensors and a scratch
  optimizer through the ordinary restore path, then keeps each rank's shard of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch
from torch import Tensor, nn
from torch.distributed.tensor import DTensor, distribute_tensor

from assay.train.checkpoint.directory import Checkpoint


def is_sharded(params: Mapping[str, Tensor]) -> bool:
    return any(isinstance(p, DTensor) for p in params.values())


def _full(t: Tensor) -> Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def _scratch_optimizer(
    optimizer: torch.optim.Optimizer,
    params: Mapping[str, Tensor],
    replacements: Mapping[str, Tensor],
) -> torch.optim.Optimizer:
    """An optimizer of ``optimizer``'s class and groups (every hyperparameter, lr included)
    over ``replacements`` in place of the live parameters, with empty state."""
    by_id = {id(p): replacements[name] for name, p in params.items()}
    groups = []
    for group in optimizer.param_groups:
        hyper = {k: v for k, v in group.items() if k != "params"}
        groups.append({**hyper, "params": [by_id[id(p)] for p in group["params"]]})
    # Optimizer's own constructor also takes defaults; its subclasses take the groups alone
    return type(optimizer)(groups)  # type: ignore[call-arg]


def gather(
    params: Mapping[str, nn.Parameter], optimizer: torch.optim.Optimizer
) -> tuple[dict[str, Tensor], torch.optim.Optimizer]:
    """Full trainables by name and an optimizer holding full state over exactly those tensors.

    Unsharded inputs come back as they are (no copy). Sharded ones are all-gathered: call on
    every rank, in the same order.
    """
    if not is_sharded(params):
        return dict(params), optimizer
    full = {name: _full(p.detach()).detach() for name, p in params.items()}
    scratch = _scratch_optimizer(optimizer, params, full)
    for group, live in zip(scratch.param_groups, optimizer.param_groups, strict=True):
        for p_full, p_live in zip(group["params"], live["params"], strict=True):
            state = optimizer.state.get(p_live)
            if state:
                scratch.state[p_full] = {
                    k: _full(v) if isinstance(v, Tensor) else v for k, v in state.items()
                }
    return full, scratch


def _shard_like(full: Tensor, like: Tensor) -> Tensor:
    """``full`` split the way ``like`` is (no communication: every rank holds ``full``)."""
    if not isinstance(like, DTensor):
        return full.to(like.device)
    return distribute_tensor(
        full.to(like.device), like.device_mesh, like.placements, src_data_rank=None
    )


def restore_sharded(
    checkpoint: Checkpoint,
    params: Mapping[str, nn.Parameter],
    optimizer: torch.optim.Optimizer | None,
) -> None:
    """:meth:`Checkpoint.restore` for sharded (DTensor) trainables and their optimizer.

    The checkpoint is loaded, with all its checks, into full scratch tensors; each rank then
    copies its own shard into the live parameters and builds the optimizer state from the
    matching shards.
    """
    full = {n: torch.empty(tuple(p.shape), dtype=p.dtype) for n, p in params.items()}
    scratch = None if optimizer is None else _scratch_optimizer(optimizer, params, full)
    checkpoint.restore(full, scratch)
    with torch.no_grad():
        for name, live in params.items():
            shard = _shard_like(full[name], live)
            if isinstance(live, DTensor):
                # split like a DTensor, the shard is one
                live.to_local().copy_(cast(DTensor, shard).to_local())
            else:
                live.copy_(shard)
    if optimizer is None or scratch is None:
        return
    saved = scratch.state_dict()
    live_params = [p for g in optimizer.param_groups for p in g["params"]]
    state: dict[int, dict[str, Any]] = {}
    for index, entry in saved["state"].items():
        like = live_params[index]
        state[index] = {
            k: _shard_like(v, like) if isinstance(v, Tensor) and v.shape == like.shape else v
            for k, v in entry.items()
        }
    optimizer.load_state_dict({"state": state, "param_groups": saved["param_groups"]})
