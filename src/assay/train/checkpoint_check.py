"""Semantic checks of a restored checkpoint: every field must make sense for this run.

The manifest's sha256 proves the files are the ones the manifest lists, not that they are
sane: a manifest re-sealed after an edit passes it. Before anything is restored,
:func:`check_restorable` checks each field against the run it is restored into (the cursor
within the dataset and consistent with the step, the scheduler's counters and learning rates,
the optimizer's step counts and state shapes, finite trainables of the right shapes), and
raises one CheckpointError naming the file and the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from assay.train.checkpoint import Checkpoint
from assay.train.checkpoint_state import CheckpointError


def _fail(checkpoint: Checkpoint, file: str, field: str, message: str) -> CheckpointError:
    return CheckpointError(f"{Path(checkpoint.path) / file}: {field}: {message}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite_list(value: Any, length: int) -> bool:
    return (
        isinstance(value, list)
        and len(value) == length
        and all(isinstance(v, (int, float)) and math.isfinite(v) for v in value)
    )


def check_cursor(checkpoint: Checkpoint, dataset_size: int, rows_per_step: int, seed: int) -> None:
    """cursor.json: the four fields, position within the dataset, seed of this run, and the
    rows it has consumed equal to ``step * rows_per_step``."""
    cursor = checkpoint.cursor
    if not isinstance(cursor, dict):
        raise _fail(checkpoint, "cursor.json", "(top level)", "expected an object")
    for key in ("epoch", "position", "seed"):
        if not _is_int(cursor.get(key)) or cursor[key] < 0:
            raise _fail(checkpoint, "cursor.json", key, f"expected a non-negative integer, "
                        f"got {cursor.get(key)!r}")  # fmt: skip
    if not isinstance(cursor.get("shuffle"), bool):
        raise _fail(checkpoint, "cursor.json", "shuffle", "expected true or false")
    extra = sorted(set(cursor) - {"epoch", "position", "seed", "shuffle"})
    if extra:
        raise _fail(checkpoint, "cursor.json", extra[0], "unknown field")
    if cursor["position"] > dataset_size:
        past = f"{cursor['position']} is past the {dataset_size} examples of the dataset"
        raise _fail(checkpoint, "cursor.json", "position", f"{past} (valid 0..{dataset_size})")
    if cursor["seed"] != seed:
        raise _fail(checkpoint, "cursor.json", "seed", f"{cursor['seed']} is not the run's {seed}")
    consumed = cursor["epoch"] * dataset_size + cursor["position"]
    if consumed != checkpoint.step * rows_per_step:
        raise _fail(checkpoint, "cursor.json", "epoch/position", f"{consumed} rows consumed, but "
                    f"step {checkpoint.step} x {rows_per_step} rows per step is "
                    f"{checkpoint.step * rows_per_step}")  # fmt: skip


def check_scheduler(checkpoint: Checkpoint, lrs: list[float]) -> None:
    """scheduler.json: a LambdaLR state at this step with this run's base learning rate of
    each parameter group (``lrs``)."""
    groups = len(lrs)
    state = checkpoint.scheduler_state
    if not isinstance(state, dict):
        raise _fail(checkpoint, "scheduler.json", "(top level)", "expected an object")
    step = checkpoint.step
    for key, wanted in (("last_epoch", step), ("_step_count", step + 1)):
        if state.get(key) != wanted or not _is_int(state.get(key)):
            raise _fail(checkpoint, "scheduler.json", key,
                        f"expected {wanted} at step {step}, got {state.get(key)!r}")  # fmt: skip
    for key in ("base_lrs", "_last_lr"):
        if not _finite_list(state.get(key), groups):
            raise _fail(checkpoint, "scheduler.json", key, f"expected {groups} finite learning "
                        f"rate(s), got {state.get(key)!r}")  # fmt: skip
    if any(
        not math.isclose(v, lr, rel_tol=1e-12) for v, lr in zip(state["base_lrs"], lrs, strict=True)
    ):
        raise _fail(checkpoint, "scheduler.json", "base_lrs",
                    f"{state['base_lrs']} is not this run's learning rates {lrs}")  # fmt: skip
    if any(v < 0 for v in state["_last_lr"]):
        raise _fail(checkpoint, "scheduler.json", "_last_lr", "a learning rate is negative")


def check_trainables(checkpoint: Checkpoint, params: Mapping[str, Tensor]) -> None:
    """trainables.safetensors: the run's names, shapes and dtypes, every value finite."""
    for name, saved in checkpoint.trainables.items():
        live = params.get(name)
        if live is None:
            raise _fail(checkpoint, "trainables.safetensors", name, "not a trainable of this run")
        if tuple(saved.shape) != tuple(live.shape) or saved.dtype != live.dtype:
            raise _fail(checkpoint, "trainables.safetensors", name, f"{tuple(saved.shape)} "
                        f"{saved.dtype}, expected {tuple(live.shape)} {live.dtype}")  # fmt: skip
        if saved.is_floating_point() and not bool(torch.isfinite(saved).all()):
            raise _fail(checkpoint, "trainables.safetensors", name, "holds NaN or infinity")
    missing = sorted(set(params) - set(checkpoint.trainables))
    if missing:
        raise _fail(checkpoint, "trainables.safetensors", missing[0], "missing")


def check_optimizer(checkpoint: Checkpoint, params: Mapping[str, Tensor]) -> None:
    """optimizer.safetensors/json: state tensors shaped like their parameter and finite, step
    counts equal to the checkpoint's step, hyperparameters finite."""
    meta = checkpoint.optimizer_meta
    groups = meta.get("param_groups") if isinstance(meta, dict) else None
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        raise _fail(checkpoint, "optimizer.json", "param_groups", "expected a list of objects")
    for g, group in enumerate(groups):
        names = group.get("param_names")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _fail(checkpoint, "optimizer.json", f"param_groups[{g}].param_names",
                        "expected a list of parameter names")  # fmt: skip
        for key, value in group.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise _fail(checkpoint, "optimizer.json", f"param_groups[{g}].{key}", "not finite")
    scalars = meta.get("scalars", {})
    if not isinstance(scalars, dict):
        raise _fail(checkpoint, "optimizer.json", "scalars", "expected an object")
    for name, entry in scalars.items():
        step = entry.get("step") if isinstance(entry, dict) else None
        if step is not None and step != checkpoint.step:
            raise _fail(checkpoint, "optimizer.json", f"scalars.{name}.step",
                        f"{step!r}, expected the checkpoint's step {checkpoint.step}")  # fmt: skip
    for key, tensor in checkpoint.optimizer_tensors.items():
        if not key.startswith("state/"):
            continue
        name, _, field = key[len("state/") :].rpartition("/")
        live = params.get(name)
        if live is None:
            raise _fail(checkpoint, "optimizer.safetensors", key, "names no trainable of this run")
        if field == "step":
            if tensor.numel() != 1 or float(tensor.reshape(())) != checkpoint.step:
                raise _fail(checkpoint, "optimizer.safetensors", key,
                            f"expected the checkpoint's step {checkpoint.step}")  # fmt: skip
            continue
        if tuple(tensor.shape) != tuple(live.shape):
            raise _fail(checkpoint, "optimizer.safetensors", key,
                        f"shape {tuple(tensor.shape)}, expected {tuple(live.shape)}")  # fmt: skip
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise _fail(checkpoint, "optimizer.safetensors", key, "holds NaN or infinity")
        if field == "exp_avg_sq" and bool((tensor < 0).any()):
            raise _fail(checkpoint, "optimizer.safetensors", key, "a second moment is negative")


def check_restorable(
    checkpoint: Checkpoint,
    *,
    params: Mapping[str, Tensor],
    dataset_size: int,
    rows_per_step: int,
    seed: int,
    lrs: list[float],
    steps: int,
) -> None:
    """Every semantic check above, plus the step within the run's ``steps``."""
    if checkpoint.step > steps:
        raise _fail(checkpoint, "manifest.json", "step",
                    f"{checkpoint.step} is past the run's {steps} steps")  # fmt: skip
    check_cursor(checkpoint, dataset_size, rows_per_step, seed)
    check_scheduler(checkpoint, lrs)
    check_trainables(checkpoint, params)
    check_optimizer(checkpoint, params)
