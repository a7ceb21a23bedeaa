"""Who this process is in a torchrun job, and the process group it trains in.

torchrun (``python -m torch.distributed.run``) starts one process per rank and tells each,
through the environment, its ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` and where the
rendezvous is (``MASTER_ADDR``/``MASTER_PORT``). Nothing here schedules anything: torchrun
starts and supervises the processes, ``torch.distributed`` moves the bytes.

Guarantees: :func:`launched` is False for a plain process, which then trains exactly as
before; :func:`init` picks gloo on CPU and NCCL on CUDA (unless told otherwise), binds a CUDA
rank to ``cuda:LOCAL_RANK`` and returns a :class:`DistContext`; :meth:`DistContext.close`
destroys the process group it created.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from assay.errors import ConfigError

BACKENDS = ("auto", "gloo", "nccl")
# How long a collective may wait for a missing rank before the job fails instead of hanging.
# Overridable because a first step on a large model can legitimately take long.
TIMEOUT_ENV = "ASSAY_DIST_TIMEOUT_S"


def launched() -> bool:
    """True inside a torchrun worker (the launcher sets RANK and WORLD_SIZE)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _env_int(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise ConfigError(f"environment: {name} is not set (launch with torchrun)")
        return default
    try:
        return int(value)
    except ValueError:
        shown = value if len(value) <= 40 else f"{value[:40]}... ({len(value)} characters)"
        raise ConfigError(f"environment: {name}={shown!r} is not an integer") from None


MAX_TIMEOUT_S = 7 * 24 * 3600


def _checked_environment() -> tuple[int, int, int]:
    """(rank, world size, local rank) from a torchrun environment, each checked, with the
    rendezvous address and the collective timeout: ConfigError naming the variable and what
    was expected, instead of a hang or an error deep inside torch.distributed."""
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    local_rank = _env_int("LOCAL_RANK", 0)
    if world < 1:
        raise ConfigError(f"environment: WORLD_SIZE={world}: expected 1 or more")
    if not 0 <= rank < world:
        raise ConfigError(f"environment: RANK={rank}: expected 0..{world - 1} (WORLD_SIZE={world})")
    if local_rank < 0:
        raise ConfigError(f"environment: LOCAL_RANK={local_rank}: expected 0 or more")
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(name):
            raise ConfigError(
                f"environment: {name} is not set (torchrun sets it; a job launched by hand "
                "needs MASTER_ADDR and MASTER_PORT beside RANK and WORLD_SIZE)"
            )
    port = _env_int("MASTER_PORT")
    if not 1 <= port <= 65535:
        raise ConfigError(f"environment: MASTER_PORT={port}: expected a port 1..65535")
    timeout = _env_int(TIMEOUT_ENV, 1800)
    if not 1 <= timeout <= MAX_TIMEOUT_S:
        raise ConfigError(
            f"environment: {TIMEOUT_ENV}={timeout}: expected seconds 1..{MAX_TIMEOUT_S} (a week)"
        )
    return rank, world, local_rank


@dataclass(frozen=True)
class DistContext:
    """This rank's place in the job. ``world_size`` 1 with ``active`` False is a plain run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    device: str = "cpu"
    active: bool = False
    owns_group: bool = False

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that prints, logs and writes checkpoints."""
        return self.rank == 0

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def all_reduce_sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum over ranks, in float64 (identity for a plain run)."""
        if not self.active:
            return [float(v) for v in values]
        tensor = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.cpu().tolist()

    @contextlib.contextmanager
    def local_main_first(self) -> Iterator[None]:
        """Run the block on local rank 0 first, then on the other ranks of the node.

        For work that fills a node-local cache (the disk stream tier): the others then find
        it complete instead of racing to write the same temporary files.
        """
        if self.active and self.local_rank != 0:
            dist.barrier()
        yield
        if self.active and self.local_rank == 0:
            dist.barrier()

    def finish(self) -> None:
        """Leave after a run every rank completed: wait for the others, then :meth:`close`.

        Without the wait a rank can tear down its gloo connections while a peer is still
        finishing on them, and the peer aborts at exit (``terminate called without an active
        exception``) after a run that succeeded.
        """
        self.barrier()
        self.close()

    def close(self) -> None:
        """Destroy the process group if this context created it (idempotent); a group that
        was already there when :func:`init` ran belongs to whoever made it."""
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()


def resolve_backend(backend: str, device: str, source: str = "distributed.backend") -> str:
    """gloo or nccl for ``device``; ConfigError for NCCL without CUDA or an unknown name."""
    if backend not in BACKENDS:
        raise ConfigError(f"{source}: {backend!r} is not one of {', '.join(BACKENDS)}")
    cuda = str(device).startswith("cuda")
    if backend == "auto":
        return "nccl" if cuda else "gloo"
    if backend == "nccl" and not cuda:
        raise ConfigError(f"{source}: nccl needs CUDA tensors; train with --device cuda or gloo")
    return backend


def init(device: str = "cpu", backend: str = "auto", source: str = "distributed") -> DistContext:
    """Join the torchrun job (or return a plain context when not launched by torchrun).

    On CUDA every rank takes ``cuda:LOCAL_RANK`` whatever ``device`` names, so one command
    line serves all ranks.
    """
    if not launched():
        return DistContext(device=str(device))
    rank, world, local_rank = _checked_environment()
    chosen = resolve_backend(backend, device, f"{source}.backend")
    if str(device).startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"{source}: --device {device} but CUDA is not available")
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=_env_int(TIMEOUT_ENV, 1800))  # bounded in _checked_environment
    owns = not dist.is_initialized()
    if owns:
        kwargs: dict[str, Any] = {"device_id": torch.device(device)} if chosen == "nccl" else {}
        dist.init_process_group(chosen, timeout=timeout, **kwargs)
    elif (dist.get_rank(), dist.get_world_size()) != (rank, world):
        raise ConfigError(
            f"{source}: a process group of rank {dist.get_rank()}/{dist.get_world_size()} "
            f"exists, but the environment says {rank}/{world}"
        )
    else:
        chosen = str(dist.get_backend())
    return DistContext(rank, world, local_rank, chosen, str(device), active=True, owns_group=owns)
