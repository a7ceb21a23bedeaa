"""The training loop on torch.distributed: DDP or FSDP2, one process per rank (torchrun).

What it guarantees, at any world size W (gloo on CPU, NCCL on CUDA):

- The step's global batch is the single-process one; rank r trains on its slice
  (:mod:`assay.distributed.sampler`).
- Loss normalisation (why the gradients agree with one process over the union of the rows):
  a CE micro-batch contributes its summed token loss divided by the scored tokens of the
  WHOLE step, summed over ranks (one all-reduce before the first backward); a preference
  micro-batch contributes its mean pair loss times its share of the step's rows, and ORPO's
  NLL term its summed chosen-token NLL divided by the chosen tokens of the whole step. Each rank's
  contributions therefore sum, over ranks, to the single-process step loss. Torch reduces
  gradients by their mean over ranks, so each rank back-propagates W times its share: the
  reduced gradient is the single-process gradient up to floating-point reduction order
  (for W a power of two the scaling itself is exact).
- Logged loss, tokens and metrics are summed (metrics: averaged) over ranks, so
  metrics.jsonl reads the same at any W. Only rank 0 shows progress and writes logs and
  checkpoints; every rank takes part in gathering sharded state first.
- Checkpoints hold full trainables and optimizer state and the cursor in global rows: they
  resume at any world size, including a plain ``assay train --resume``.
- Randomness: every rank seeds the same generators and a checkpoint restores rank 0's
  generator state on every rank. NEFTune noise is therefore drawn per rank and is not the
  noise a single process would draw; turn it off where world-size invariance matters.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, cast

import torch

from assay.distributed.context import DistContext
from assay.distributed.sampler import ShardedBatches, check_divisible
from assay.distributed.state import gather, is_sharded, restore_sharded
from assay.distributed.wrap import DDPRunner, fsdp_no_sync, shard
from assay.settings import TrainConfig
from assay.settings.loader import check_distributed
from assay.train.build import build_model
from assay.train.checkpoint.directory import Checkpoint, save_checkpoint
from assay.train.data.dataset import Batch, Cursor, collate
from assay.train.loop import Trainer

if TYPE_CHECKING:
    from assay.model.decoder import Decoder
    from assay.model.runner import Runner
    from assay.stream import StreamedModel


class DistributedTrainer(Trainer):
    """:class:`~assay.train.loop.Trainer` for one rank of a data-parallel or sharded job."""

    def __init__(
        self,
        config: TrainConfig,
        context: DistContext,
        *,
        progress: bool = True,
    ) -> None:
        check_distributed(config, launched=context.world_size > 1)
        self.context = context
        self.strategy = config.distributed.strategy if config.distributed else "ddp"
        rows = config.batch.micro_batch * config.batch.grad_accum
        check_divisible(rows, context.world_size, f"{config.source}: batch")
        self.is_main = context.is_main
        super().__init__(config, device=context.device, progress=progress)

    # -- construction --------------------------------------------------------------------------
    def _build_model(self) -> tuple[Decoder | StreamedModel, Decoder]:
        # A disk-tier stream cache is per node: let local rank 0 write it, the others reuse it.
        with self.context.local_main_first():
            return build_model(self.config, self.device)

    def _wrap(self, runner: Decoder | StreamedModel) -> Runner:
        if not self.context.active:
            return runner
        if self.strategy == "fsdp":
            return shard(self.base, self.context)
        return DDPRunner(runner, self.context)

    def _batches(self, cursor: Cursor) -> ShardedBatches:
        batch = self.config.batch
        return ShardedBatches(
            len(self.train_data),
            batch.micro_batch,
            batch.grad_accum,
            self.context.rank,
            self.context.world_size,
            cursor,
        )

    # -- one step ------------------------------------------------------------------------------
    def _micro_batches(self) -> list[Batch]:
        examples = self.train_data.examples
        return [
            self._on_device(collate([examples[i] for i in rows], self.pad_id))
            for rows in self.batches.next_step()
        ]

    def _step_counts(self, micro: list[Batch]) -> tuple[int, int]:
        local = super()._step_counts(micro)
        scored, divisor = self.context.all_reduce_sum(list(local))
        return int(scored), int(divisor)

    def _backward(self, share: torch.Tensor) -> None:
        # DDP and FSDP average gradients over ranks; W x share makes the average the sum.
        world = self.context.world_size
        (share * world if world != 1 else share).backward()

    def _gradient_sync(self, last: bool) -> contextlib.AbstractContextManager[Any]:
        if not self.context.active or last:
            return contextlib.nullcontext()
        if self.strategy == "fsdp":
            return fsdp_no_sync(self.base)
        return cast(DDPRunner, self.model).no_sync()  # the model _wrap built for DDP

    def _step_totals(
        self, loss: float, tokens: int, metrics: dict[str, float]
    ) -> tuple[float, int, dict[str, float]]:
        names = sorted(metrics)
        summed = self.context.all_reduce_sum([loss, tokens, *(metrics[k] for k in names)])
        world = self.context.world_size
        averaged = {k: v / world for k, v in zip(names, summed[2:], strict=True)}
        return summed[0], int(summed[1]), averaged

    # -- state ---------------------------------------------------------------------------------
    def _restore(self, checkpoint: Checkpoint) -> None:
        if is_sharded(self.params):
            restore_sharded(checkpoint, self.params, self.optimizer)
        else:
            super()._restore(checkpoint)

    def save(self):
        """Gather full state (every rank), write it from rank 0 only, then wait for the write."""
        params, optimizer = gather(self.params, self.optimizer)
        path = self.out_dir / f"step-{self.step:06d}"
        if self.is_main:
            path = save_checkpoint(
                self.out_dir,
                self.step,
                params,
                optimizer,
                self.scheduler.state_dict(),
                self.batches.cursor,
                self.fingerprints,
            )
        self.context.barrier()
        return path

    def _agree_to_stop(self, asked: bool) -> bool:
        # torchrun forwards a signal to every worker, but not at the same step: the max over
        # ranks makes them all stop (and save) after the same step.
        return self.context.all_reduce_sum([1.0 if asked else 0.0])[0] > 0

    def _summary_extra(self) -> dict[str, Any]:
        return {
            "world_size": self.context.world_size,
            "strategy": self.strategy if self.context.active else None,
            "backend": self.context.backend,
        }
