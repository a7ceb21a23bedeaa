"""Deterministic sharding of each optimizer step's rows over the ranks.

The global batch of a step is what a single process would train on: ``grad_accum``
micro-batches of ``micro_batch`` example indices drawn from the shared, seeded
:class:`~assay.train.data.dataset.BatchIterator`. Every rank draws the same global rows (no
communication: same seed, same cursor) and keeps one contiguous slice of them.

Guarantees:

- the slices of ranks ``0..world-1``, concatenated in rank order, are exactly the global rows
  of the step, so world size 1 training on the union is the reference for any world size;
- slices are disjoint as positions and equal in size (the rows must split evenly);
- the data position (the iterator's cursor) is counted in global rows, so a checkpoint taken
  at one world size resumes at the same sample at any other;
- each rank runs its slice in micro-batches of at most ``micro_batch`` rows, so a rank never
  needs more activation memory than the single-process run. When ``grad_accum`` is a multiple
  of the world size, each rank's micro-batches are exactly the single process's.
"""

from __future__ import annotations

from collections.abc import Sequence

from assay.errors import ConfigError
from assay.train.data.dataset import BatchIterator, Cursor


def check_divisible(rows_per_step: int, world_size: int, source: str = "batch") -> None:
    """ConfigError unless the step's rows split into ``world_size`` equal slices."""
    if world_size < 1:
        raise ValueError(f"world size must be positive, got {world_size}")
    if rows_per_step % world_size:
        raise ConfigError(
            f"{source}: micro_batch * grad_accum = {rows_per_step} rows per step do not split "
            f"evenly over {world_size} ranks; make it a multiple of {world_size}"
        )


def rank_slice(rows: Sequence[int], rank: int, world_size: int) -> list[int]:
    """Rank ``rank``'s contiguous share of one step's ``rows`` (equal shares, rank order)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside a world of {world_size}")
    check_divisible(len(rows), world_size)
    share = len(rows) // world_size
    return list(rows[rank * share : (rank + 1) * share])


def chunk(rows: Sequence[int], size: int) -> list[list[int]]:
    """``rows`` in consecutive micro-batches of ``size`` (the last may be shorter)."""
    if size < 1:
        raise ValueError(f"micro-batch size must be positive, got {size}")
    return [list(rows[i : i + size]) for i in range(0, len(rows), size)]


class ShardedBatches:
    """This rank's micro-batches of example indices, one optimizer step at a time.

    Wraps the single-process iterator: :meth:`next_step` draws the step's ``grad_accum``
    global micro-batches from it, keeps this rank's slice, and re-chunks it by
    ``micro_batch``. :attr:`cursor` is the iterator's, i.e. in global rows.
    """

    def __init__(
        self,
        dataset_size: int,
        micro_batch: int,
        grad_accum: int,
        rank: int,
        world_size: int,
        cursor: Cursor | None = None,
    ) -> None:
        check_divisible(micro_batch * grad_accum, world_size)
        self.iterator = BatchIterator(dataset_size, micro_batch, cursor)
        self.micro_batch, self.grad_accum = micro_batch, grad_accum
        self.rank, self.world_size = rank, world_size

    @property
    def cursor(self) -> Cursor:
        return self.iterator.cursor

    def global_rows(self) -> list[int]:
        """The next step's rows for the whole job (advances the cursor by one step)."""
        return [i for _ in range(self.grad_accum) for i in next(self.iterator)]

    def next_step(self) -> list[list[int]]:
        """This rank's micro-batches for the next step (advances the cursor by one step)."""
        mine = rank_slice(self.global_rows(), self.rank, self.world_size)
        return chunk(mine, self.micro_batch)
