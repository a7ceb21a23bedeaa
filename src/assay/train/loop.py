"""The training loop: micro-batches, accumulation, AdamW, schedule, clipping, checkpoints, resume.

Accumulation divides every micro-batch's summed loss by the scored tokens of the whole
optimizer step, so k micro-batches of 1 give the gradient of one batch of k (to fp rounding).

The methods prefixed ``_`` between "one step" and "the run" are the seams
:class:`assay.distributed.trainer.DistributedTrainer` overrides (which rows, how a
micro-batch's loss is normalised, when gradients synchronise, what is summed over ranks);
here they are the single-process identity.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
import yaml
from tqdm import tqdm

from assay.atomic import atomic_write_bytes
from assay.bounded import JSONL_BYTES, parse_json, read_capped
from assay.errors import DivergedError
from assay.model.tokenizer import check_fits
from assay.settings import TrainConfig
from assay.settings.loader import config_as_yaml, config_fingerprint, model_path
from assay.train.build import (
    NEFTune,
    build_datasets,
    build_model,
    build_optimizer,
    build_tokenizer,
    decay_groups,
    lr_factor,
    seed_everything,
    trainable_parameters,
)
from assay.train.checkpoint.check import check_restorable
from assay.train.checkpoint.directory import (
    Checkpoint,
    load_checkpoint,
    model_fingerprints,
    save_checkpoint,
)
from assay.train.data.dataset import (
    Batch,
    BatchIterator,
    Cursor,
    Dataset,
    collate,
    dataset_fingerprint,
    tokens_fingerprint,
)
from assay.train.objective import Objective
from assay.train.run.folder import mark_new_run, not_started, record_written
from assay.train.run.state import recorded_state

if TYPE_CHECKING:
    from assay.model.decoder import Decoder
    from assay.model.runner import Runner
    from assay.stream import StreamedModel

METRICS = "metrics.jsonl"
RUN_CONFIG = "config.yaml"


@dataclass(frozen=True)
class StepRecord:
    """One optimizer step as logged to metrics.jsonl."""

    step: int
    loss: float
    lr: float
    grad_norm: float
    tokens: int
    scored_tokens: int
    seconds: float
    tokens_per_s: float
    metrics: dict[str, float] = field(default_factory=dict)


def recorded_device(run_dir: Path) -> str | None:
    """The device the newest step in ``run_dir``'s metrics.jsonl ran on (None: no step, or
    rows written before the device was recorded)."""
    path = run_dir / METRICS
    if not path.is_file():
        return None
    device = None
    for line in read_capped(path, JSONL_BYTES, "metrics file").split(b"\n"):
        try:
            row = parse_json(line)
        except ValueError:
            break  # a torn last line (or the empty piece after the final newline)
        if isinstance(row, dict) and isinstance(row.get("device"), str):
            device = row["device"]
    return device


class Trainer:
    """One run of ``config``: ``train()`` from scratch or ``resume()`` from a checkpoint."""

    #: Rank 0 of a distributed job (always True here): the process that logs and writes.
    is_main = True

    def __init__(self, config: TrainConfig, *, device: str = "cpu", progress: bool = True) -> None:
        self.config, self.device, self.progress = config, device, progress
        seed_everything(config.seed)
        # the tokenizer first: a bad one is refused before any weight is decoded or streamed
        self.tokenizer = build_tokenizer(config)
        runner, self.base = self._build_model()
        self.base.train()  # adapter dropout (when configured) is on for training steps
        check_fits(self.tokenizer, self.base.config.vocab_size, str(model_path(config)))
        self.train_data, self.eval_data = build_datasets(config, self.tokenizer)
        self.model = self._wrap(runner)
        self.params = trainable_parameters(self.base)
        self.optimizer = build_optimizer(config, self.params)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_factor(config))
        self.batches = self._batches(Cursor(seed=config.seed))
        self.objective = Objective(config, self.model, self.base)
        self.neftune = NEFTune(self.base.embed_tokens, config.neftune_alpha)
        self.pad_id = self._pad_id()
        self.fingerprints = {
            "config": config_fingerprint(config),
            "dataset": dataset_fingerprint(self.train_data),
            **model_fingerprints(self.base),
            "tokens": tokens_fingerprint(self.train_data),
        }
        self.step = 0
        self.out_dir = Path(config.output.dir)

    def _pad_id(self) -> int:
        for candidate in (self.tokenizer.pad_id, self.tokenizer.eos_id, 0):
            if candidate is not None:
                return int(candidate)
        return 0

    # -- resume ------------------------------------------------------------------------------
    def checked_checkpoint(self, path: str | os.PathLike[str]) -> Checkpoint | None:
        """The checkpoint ``path`` names, after every check a resume makes (config, dataset
        and model fingerprints, optimizer, scheduler, cursor and settings); None for a run
        killed before its first checkpoint. Writes nothing and changes no state."""
        if not_started(path):
            return None
        checkpoint = load_checkpoint(path, fingerprints=self.fingerprints)
        check_restorable(
            checkpoint,
            params=self.params,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            lr_factor=lr_factor(self.config),
            dataset_size=len(self.train_data),
            rows_per_step=self.rows_per_step,
            seed=self.config.seed,
            shuffle=self.batches.cursor.shuffle,
            steps=self.config.steps,
        )
        return checkpoint

    def resume(self, path: str | os.PathLike[str]) -> int:
        """Restore trainables, optimizer, scheduler, RNG and data cursor; returns the step.

        Refuses (naming which) when the config, dataset or model fingerprint differs.
        """
        return self.restore(self.checked_checkpoint(path))

    def restore(self, checkpoint: Checkpoint | None) -> int:
        """Restore what :meth:`checked_checkpoint` returned (None: a run killed before its
        first checkpoint, which starts clean at step 0); returns the step."""
        if checkpoint is None:
            # Killed before its first checkpoint: nothing to restore; start clean at step 0.
            self.step = 0
            if self.is_main:
                self._truncate_metrics(0)
            return 0
        self._restore(checkpoint)
        self.scheduler.load_state_dict(checkpoint.scheduler_state)
        self.batches = self._batches(Cursor.from_dict(checkpoint.cursor))
        self.step = checkpoint.step
        if self.is_main:
            self._truncate_metrics(self.step)
        return self.step

    def _restore(self, checkpoint: Checkpoint) -> None:
        checkpoint.restore(self.params, self.optimizer)

    def _truncate_metrics(self, step: int) -> None:
        """Keep only the metrics of steps up to ``step`` (a kill may have left later ones).

        Lines are split on ``\\n`` alone and kept as the bytes they were; reading stops at the
        first line that is not a JSON object with a ``step`` (a torn last line)."""
        path = self.out_dir / METRICS
        if not path.exists():
            return
        kept = []
        for line in read_capped(path, JSONL_BYTES, "metrics file").split(b"\n"):
            try:
                row = parse_json(line)
                if row["step"] <= step:
                    kept.append(line)
            except (ValueError, KeyError, TypeError):
                break  # a torn last line (or the empty piece after the final newline)
        atomic_write_bytes(path, b"".join(line + b"\n" for line in kept))

    # -- one step ----------------------------------------------------------------------------
    def _build_model(self) -> tuple[Decoder | StreamedModel, Decoder]:
        return build_model(self.config, self.device)

    def _wrap(self, runner: Decoder | StreamedModel) -> Runner:
        """What the objective runs (the streamed or resident model, or its parallel wrapper)."""
        return runner

    def _batches(self, cursor: Cursor) -> Any:
        """The batch order from ``cursor`` (its position counts rows of the whole step)."""
        return BatchIterator(len(self.train_data), self.config.batch.micro_batch, cursor)

    def _micro_batches(self) -> list[Batch]:
        examples = self.train_data.examples
        return [
            self._on_device(collate([examples[i] for i in next(self.batches)], self.pad_id))
            for _ in range(self.config.batch.grad_accum)
        ]

    def _on_device(self, batch: Batch) -> Batch:
        """``batch`` with its tensors on the compute device (the same objects on CPU)."""
        if torch.device(self.device).type == "cpu":
            return batch
        moved = {
            f.name: getattr(batch, f.name).to(self.device)
            for f in dataclasses.fields(batch)
            if isinstance(getattr(batch, f.name), torch.Tensor)
        }
        return dataclasses.replace(batch, **moved)

    @property
    def rows_per_step(self) -> int:
        """Rows (pairs for preference data) of one optimizer step, over every rank."""
        return self.config.batch.micro_batch * self.config.batch.grad_accum

    def _step_counts(self, micro: list[Batch]) -> tuple[int, int]:
        """The whole step's scored tokens (logged) and the tokens its loss is divided by (the
        objective's normaliser), each summed over every micro-batch."""
        scored = sum(int(b.loss_mask.sum()) for b in micro)
        return scored, sum(self.objective.normaliser(b) for b in micro)

    def _share(self, batch: Batch, divisor: int) -> torch.Tensor:
        """This micro-batch's share of the step loss (the shares sum to the step loss)."""
        return self.objective.loss(batch, divisor, len(batch.lines) / self.rows_per_step)

    def _backward(self, share: torch.Tensor) -> None:
        share.backward()

    def _gradient_sync(self, last: bool) -> contextlib.AbstractContextManager[Any]:
        """Context for one micro-batch's backward; ``last`` is the step's final one."""
        return contextlib.nullcontext()

    def _step_totals(
        self, loss: float, tokens: int, metrics: dict[str, float]
    ) -> tuple[float, int, dict[str, float]]:
        """The step's loss, tokens and metrics for the whole job (here: this process's)."""
        return loss, tokens, metrics

    def train_step(self) -> StepRecord:
        """One optimizer step over ``grad_accum`` micro-batches."""
        started = time.perf_counter()
        micro = self._micro_batches()
        scored, divisor = self._step_counts(micro)
        total_loss = 0.0
        collected: list[dict[str, float]] = []
        for index, batch in enumerate(micro):
            with self._gradient_sync(last=index == len(micro) - 1):
                loss = self._share(batch, divisor)
                self._backward(loss)
            total_loss += loss.item()
            collected.append(self.objective.metrics())
        params = list(self.params.values())
        clip = self.config.optim.grad_clip
        norm = torch.nn.utils.clip_grad_norm_(params, clip if clip else float("inf"))
        # the norm is the whole job's (gradients are reduced before it), so every rank agrees
        _check_finite(self.step + 1, "gradient norm", _as_float(norm), total_loss)
        # torch allows a tensor rate; build_optimizer's groups hold floats
        lr = cast(float, self.scheduler.get_last_lr()[0])
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        tokens = sum(int(b.attention_mask.sum()) for b in micro)
        names = sorted(set().union(*collected))
        metrics = {
            k: sum(m[k] for m in collected if k in m) / sum(k in m for m in collected)
            for k in names
        }
        total_loss, tokens, metrics = self._step_totals(total_loss, tokens, metrics)
        _check_finite(self.step, "loss", total_loss, total_loss)
        seconds = time.perf_counter() - started
        return StepRecord(
            self.step,
            total_loss,
            lr,
            _as_float(norm),
            tokens,
            scored,
            seconds,
            tokens / seconds,
            metrics,
        )

    # -- the run -----------------------------------------------------------------------------
    def write_run_config(self) -> Path:
        """Copy the YAML config into the run dir with every path absolute (for export/eval),
        followed by comment lines that list the weight-decay groups the optimizer was built
        with (comments, so the copy still loads back to an equal config)."""
        raw = config_as_yaml(self.config)
        path = self.out_dir / RUN_CONFIG
        decay, plain = decay_groups(self.params)
        wd = self.config.optim.weight_decay
        lines = [f"# weight decay {wd:g} applies to {len(decay)} tensor(s) of 2+ dimensions:"]
        lines += [f"#   {name}" for name in decay]
        lines.append(f"# no weight decay on {len(plain)} vector(s) (norms, biases, magnitudes):")
        lines += [f"#   {name}" for name in plain]
        lines.append(f"# trained on device {self.device} (metrics.jsonl names it at every step)")
        text = yaml.safe_dump(raw, sort_keys=False) + "\n".join(lines) + "\n"
        atomic_write_bytes(path, text.encode())
        return path

    def train(
        self,
        stop_at: int | None = None,
        stop_requested: Callable[[], bool] | None = None,
        report: Callable[[dict[str, Any]], None] | None = None,
        on_checkpoint: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Run to ``config.steps`` (or stop after step ``stop_at``, saving a checkpoint there),
        logging and checkpointing; returns the summary. Only the main process shows the
        progress bar and writes the run config and metrics.

        ``stop_requested`` is asked after every optimizer step (every rank agrees on the
        answer); once it says True the run saves a checkpoint at that step and ends, with
        ``"stopped": True`` in the summary (no final evaluation) and its ``reason`` attribute
        (default "signal") in the run state. ``report`` receives each
        metrics line after it is written, and ``on_checkpoint`` is called after each
        checkpoint is complete (main process only)."""
        config = self.config
        last = config.steps if stop_at is None else min(stop_at, config.steps)
        if self.is_main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            mark_new_run(self.out_dir)
            self.write_run_config()
        started, records, stopped = time.perf_counter(), [], False
        bar = tqdm(
            total=last,
            initial=self.step,
            desc=f"train on {self.device}",
            disable=not (self.progress and self.is_main),
            unit="step",
            dynamic_ncols=True,
        )
        with contextlib.ExitStack() as stack:
            if self.is_main:  # last out: what the run wrote, state included, is recorded
                stack.callback(record_written, self.out_dir)
            outcome = stack.enter_context(
                recorded_state(self.out_dir, self.is_main, config.steps, lambda: self.step)
            )
            if self.is_main:
                record_written(self.out_dir)
            stack.enter_context(bar)
            log = None
            if self.is_main:
                log = stack.enter_context((self.out_dir / METRICS).open("a", encoding="utf-8"))
            every = config.output.eval_every
            while self.step < last:
                record = self.train_step()
                records.append(record)
                line = {**asdict(record), "device": str(self.device)}
                if every and record.step % every == 0:
                    # every rank evaluates (an FSDP forward needs them all); rank 0 writes
                    line["eval_loss"] = self.evaluate()
                if log is not None:
                    log.write(json.dumps(line) + "\n")
                    log.flush()
                    if report is not None:
                        report(line)
                bar.update(1)
                bar.set_postfix(loss=f"{record.loss:.4f}", tok_s=f"{record.tokens_per_s:.0f}")
                saved = record.step % config.output.save_every == 0 or record.step == last
                if saved:
                    self._save_and_tell(on_checkpoint)
                if stop_requested is not None and self._agree_to_stop(stop_requested()):
                    if not saved:
                        self._save_and_tell(on_checkpoint)
                    stopped = True
                    outcome["reason"] = getattr(stop_requested, "reason", "signal")
                    break
        elapsed = time.perf_counter() - started
        tokens = sum(r.tokens for r in records)
        return {
            "device": str(self.device),
            "steps": self.step,
            "steps_this_run": len(records),
            "final_loss": records[-1].loss if records else None,
            "losses": [r.loss for r in records],
            "tokens": tokens,
            "seconds": elapsed,
            "tokens_per_s": tokens / elapsed if elapsed else None,
            "eval_loss": self.evaluate() if self.eval_data is not None and not stopped else None,
            "stopped": stopped,
            "checkpoint": str(self.out_dir / f"step-{self.step:06d}"),
            "fingerprints": self.fingerprints,
            "train_examples": len(self.train_data),
            **self._summary_extra(),
        }

    def _summary_extra(self) -> dict[str, Any]:
        return {}

    def _agree_to_stop(self, asked: bool) -> bool:
        """Whether the run stops after this step; a job of several ranks stops when any is
        asked (so all stop at the same step)."""
        return asked

    def _save_and_tell(self, on_checkpoint: Callable[[], None] | None) -> None:
        self.save()
        if self.is_main:
            record_written(self.out_dir)
            if on_checkpoint is not None:
                on_checkpoint()

    def save(self) -> Path:
        return save_checkpoint(
            self.out_dir,
            self.step,
            self.params,
            self.optimizer,
            self.scheduler.state_dict(),
            self.batches.cursor,
            self.fingerprints,
        )

    @torch.no_grad()
    def evaluate(self, dataset: Dataset | None = None) -> float:
        """Mean next-token loss over every scored token of ``dataset`` (default: eval set)."""
        data = dataset or self.eval_data
        if data is None:
            raise ValueError("no eval data: set data.eval in the config")
        self.neftune.enabled = False
        self.base.eval()  # adapter dropout off; evaluation draws no random numbers
        try:
            total, count = 0.0, 0
            size = self.config.batch.micro_batch
            for start in range(0, len(data), size):
                batch = self._on_device(
                    collate(list(data.examples[start : start + size]), self.pad_id)
                )
                n = int(batch.loss_mask.sum())
                share = self.objective.loss(batch, self.objective.normaliser(batch), 1.0)
                total += float(share) * n
                count += n
            return total / count
        finally:
            self.neftune.enabled = True
            self.base.train()


def _check_finite(step: int, what: str, value: float, loss: float) -> None:
    """DivergedError, before anything of step ``step`` is logged or saved, when ``value`` is
    NaN or infinite: a diverged run stops with its last good checkpoint, never writing numbers
    that ``status`` and ``--resume`` would refuse."""
    if not math.isfinite(value):
        raise DivergedError(
            f"step {step}: the {what} is {value} (step loss {loss:.6g}): the run diverged and "
            "stops here, without logging or saving this step; lower optim.lr, set "
            "optim.grad_clip or check the model's config"
        )


def _as_float(value: torch.Tensor | float) -> float:
    """A scalar as a Python float; a replicated DTensor (FSDP2's grad norm) via its full value."""
    full = getattr(value, "full_tensor", None)
    return float(full() if full is not None else value)
