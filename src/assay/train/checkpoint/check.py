"""Semantic checks of a restored checkpoint: every field must make sense for this run.

The manifest's sha256 proves the files are the ones the manifest lists, not that they are
sane: a manifest re-sealed after an edit passes it. Before anything is restored,
:func:`check_restorable` checks each field against the run it is restored into (the cursor
within the dataset and consistent with the step, the scheduler's counters and learning rates,
the optimizer's step counts and state shapes, finite trainables of the right shapes, and every
setting the config decides equal to the config's at that step), and raises one CheckpointError
naming the file and the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from assay.train.checkpoint.directory import Checkpoint
from assay.train.checkpoint.state import CheckpointError


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


def check_cursor(
    checkpoint: Checkpoint, dataset_size: int, rows_per_step: int, seed: int, shuffle: bool
) -> None:
    """cursor.json: the four fields, position within the dataset, seed and shuffle of this run,
    and the rows it has consumed equal to ``step * rows_per_step``."""
    cursor = checkpoint.cursor
    if not isinstance(cursor, dict):
        raise _fail(checkpoint, "cursor.json", "(top level)", "expected an object")
    for key in ("epoch", "position", "seed"):
        if not _is_int(cursor.get(key)) or cursor[key] < 0:
            raise _fail(
                checkpoint,
                "cursor.json",
                key,
                f"expected a non-negative integer, got {cursor.get(key)!r}",
            )
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
    if cursor["shuffle"] != shuffle:
        raise _fail(
            checkpoint, "cursor.json", "shuffle", f"{cursor['shuffle']} is not the run's {shuffle}"
        )
    consumed = cursor["epoch"] * dataset_size + cursor["position"]
    if consumed != checkpoint.step * rows_per_step:
        raise _fail(
            checkpoint,
            "cursor.json",
            "epoch/position",
            f"{consumed} rows consumed, but "
            f"step {checkpoint.step} x {rows_per_step} rows per step is "
            f"{checkpoint.step * rows_per_step}",
        )


def scheduled_lrs(optimizer: Optimizer, lr_factor: Callable[[int], float], step: int) -> list:
    """Each group's learning rate after ``step`` scheduler steps, as LambdaLR computes it."""
    return [group["initial_lr"] * lr_factor(step) for group in optimizer.param_groups]


def check_scheduler(checkpoint: Checkpoint, scheduler: LRScheduler, lrs: list[float]) -> None:
    """scheduler.json: this run's LambdaLR (``scheduler``, fresh) at the checkpoint's step: its
    counters at the step, its base learning rates and every other field the fresh one's, and
    its last learning rates ``lrs`` (the schedule's at the step). Missing fields are left to
    the fresh scheduler; unknown ones are refused."""
    state = checkpoint.scheduler_state
    if not isinstance(state, dict):
        raise _fail(checkpoint, "scheduler.json", "(top level)", "expected an object")
    step = checkpoint.step
    for key, wanted in (("last_epoch", step), ("_step_count", step + 1)):
        if state.get(key) != wanted or not _is_int(state.get(key)):
            raise _fail(
                checkpoint,
                "scheduler.json",
                key,
                f"expected {wanted} at step {step}, got {state.get(key)!r}",
            )
    want = {**scheduler.state_dict(), "last_epoch": step, "_step_count": step + 1, "_last_lr": lrs}
    for key in sorted(state):
        if key not in want:
            raise _fail(checkpoint, "scheduler.json", key, "not a field of this run's scheduler")
        if not same_setting(state[key], want[key]):
            at = f" at step {step}" if key == "_last_lr" else ""
            raise _fail(
                checkpoint,
                "scheduler.json",
                key,
                f"{_shown(state[key])}, but this run's is {want[key]!r}{at}",
            )


def check_optimizer_settings(
    checkpoint: Checkpoint, optimizer: Optimizer, lrs: list[float]
) -> None:
    """optimizer.json's settings are this run's: every group's hyperparameters as its config
    builds them (``optimizer``, fresh), its lr the schedule's at the checkpoint's step
    (``lrs``). A resume takes its settings from its config: a checkpoint that says otherwise
    was edited, and is refused rather than trained with. A setting the checkpoint lacks is the
    config's (``optimizer_from_files``); one this run's optimizer lacks is refused."""
    saved_groups = checkpoint.optimizer_meta["param_groups"]
    live_groups = optimizer.param_groups
    if len(saved_groups) != len(live_groups):
        raise _fail(
            checkpoint,
            "optimizer.json",
            "param_groups",
            f"{len(saved_groups)} groups, this run builds {len(live_groups)}",
        )
    for g, (saved, live) in enumerate(zip(saved_groups, live_groups, strict=True)):
        want = {key: value for key, value in live.items() if key != "params"}
        want["lr"] = lrs[g]
        prefix = f"group/{g}/"
        have = {key: value for key, value in saved.items() if key != "param_names"}
        have.update(
            {
                key[len(prefix) :]: tensor
                for key, tensor in checkpoint.optimizer_tensors.items()
                if key.startswith(prefix)
            }
        )
        for key in sorted(have):
            field = f"param_groups[{g}].{key}"
            if key not in want:
                raise _fail(
                    checkpoint, "optimizer.json", field, "not a setting of this run's optimizer"
                )
            if not same_setting(have[key], want[key]):
                at = f" at step {checkpoint.step}" if key == "lr" else ""
                found = f"{_shown(have[key])}, but this run's is {want[key]!r}{at}"
                raise _fail(checkpoint, "optimizer.json", field, found)


def same_setting(saved: Any, want: Any) -> bool:
    """``saved``, as JSON or safetensors gave it back, is the setting ``want``, type included:
    1 is not True, 1.0 is 1, a list stands for a tuple, a tensor equals only a tensor."""
    if isinstance(want, Tensor):
        return (
            isinstance(saved, Tensor)
            and saved.shape == want.shape
            and bool(torch.equal(saved, want.detach().cpu()))
        )
    if isinstance(want, (tuple, list)):
        return (
            isinstance(saved, list)
            and len(saved) == len(want)
            and all(map(same_setting, saved, want))
        )
    if isinstance(want, (bool, str)) or want is None:
        return type(saved) is type(want) and saved == want
    if isinstance(want, (int, float)):
        return isinstance(saved, (int, float)) and not isinstance(saved, bool) and saved == want
    return False


def _shown(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_trainables(checkpoint: Checkpoint, params: Mapping[str, Tensor]) -> None:
    """trainables.safetensors: the run's names, shapes and dtypes, every value finite."""
    for name, saved in checkpoint.trainables.items():
        live = params.get(name)
        if live is None:
            raise _fail(checkpoint, "trainables.safetensors", name, "not a trainable of this run")
        if tuple(saved.shape) != tuple(live.shape) or saved.dtype != live.dtype:
            raise _fail(
                checkpoint,
                "trainables.safetensors",
                name,
                f"{tuple(saved.shape)} {saved.dtype}, expected {tuple(live.shape)} {live.dtype}",
            )
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
            raise _fail(
                checkpoint,
                "optimizer.json",
                f"param_groups[{g}].param_names",
                "expected a list of parameter names",
            )
        for key, value in group.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise _fail(checkpoint, "optimizer.json", f"param_groups[{g}].{key}", "not finite")
    scalars = meta.get("scalars", {})
    if not isinstance(scalars, dict):
        raise _fail(checkpoint, "optimizer.json", "scalars", "expected an object")
    for name, entry in scalars.items():
        step = entry.get("step") if isinstance(entry, dict) else None
        if step is not None and step != checkpoint.step:
            raise _fail(
                checkpoint,
                "optimizer.json",
                f"scalars.{name}.step",
                f"{step!r}, expected the checkpoint's step {checkpoint.step}",
            )
    for key, tensor in checkpoint.optimizer_tensors.items():
        if not key.startswith("state/"):
            continue
        name, _, field = key[len("state/") :].rpartition("/")
        live = params.get(name)
        if live is None:
            raise _fail(checkpoint, "optimizer.safetensors", key, "names no trainable of this run")
        if field == "step":
            if tensor.numel() != 1 or float(tensor.reshape(())) != checkpoint.step:
                raise _fail(
                    checkpoint,
                    "optimizer.safetensors",
                    key,
                    f"expected the checkpoint's step {checkpoint.step}",
                )
            continue
        if tuple(tensor.shape) != tuple(live.shape):
            raise _fail(
                checkpoint,
                "optimizer.safetensors",
                key,
                f"shape {tuple(tensor.shape)}, expected {tuple(live.shape)}",
            )
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise _fail(checkpoint, "optimizer.safetensors", key, "holds NaN or infinity")
        if field == "exp_avg_sq" and bool((tensor < 0).any()):
            raise _fail(checkpoint, "optimizer.safetensors", key, "a second moment is negative")


def check_restorable(
    checkpoint: Checkpoint,
    *,
    params: Mapping[str, Tensor],
    optimizer: Optimizer,
    scheduler: LRScheduler,
    lr_factor: Callable[[int], float],
    dataset_size: int,
    rows_per_step: int,
    seed: int,
    shuffle: bool,
    steps: int,
) -> None:
    """Every semantic check above, plus the step within the run's ``steps``. ``optimizer`` and
    ``scheduler`` are the run's, fresh from its config (nothing restored into them yet)."""
    if checkpoint.step > steps:
        raise _fail(
            checkpoint,
            "manifest.json",
            "step",
            f"{checkpoint.step} is past the run's {steps} steps",
        )
    check_cursor(checkpoint, dataset_size, rows_per_step, seed, shuffle)
    lrs = scheduled_lrs(optimizer, lr_factor, checkpoint.step)
    check_scheduler(checkpoint, scheduler, lrs)
    check_trainables(checkpoint, params)
    check_optimizer(checkpoint, params)
    check_optimizer_settings(checkpoint, optimizer, lrs)
