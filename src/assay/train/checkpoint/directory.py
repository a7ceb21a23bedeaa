"""Checkpoint directories: atomic to write, verified to read, exact to resume from.

A run directory holds ``step-NNNNNN/`` checkpoints and a ``latest`` file naming the newest
complete one. Each checkpoint directory holds::

    trainables.safetensors   the trainable tensors, by name
    optimizer.safetensors    optimizer state tensors ("state/<param>/<key>")
    optimizer.json           param groups (hyperparameters, parameter names), scalar state
    rng.safetensors          torch CPU (and CUDA) generator states as uint8 tensors
    rng.json                 numpy bit generator and python ``random`` states
    scheduler.json           the scheduler's state (any JSON)
    cursor.json              the data cursor (assay.train.data.dataset.Cursor.to_dict())
    manifest.json            format, step, fingerprints (config, dataset, model) and the
                             sha256 and size of every file above; written last

Saving writes into a temporary directory, fsyncs, renames it to ``step-NNNNNN`` and only then
atomically rewrites ``latest``: a save killed at any moment leaves ``latest`` naming the last
complete checkpoint. Loading verifies every file against the manifest before parsing it and
refuses a checkpoint whose fingerprints differ from the run's. No pickle anywhere.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor

from assay.atomic import (
    atomic_write_bytes,
    json_bytes,
    remove_stale_temporaries,
    staged_directory,
    write_synced,
)
from assay.bounded import JSON_BYTES, InputTooLarge, parse_json, read_capped
from assay.train.checkpoint.layout import (
    CHECKPOINT_FILES,
    LATEST,
    MANIFEST,
    STEP_FOLDER,
    not_in_a_checkpoint,
    step_dirname,
)
from assay.train.checkpoint.state import (
    CheckpointError,
    capture_rng,
    optimizer_from_files,
    optimizer_to_files,
    restore_rng,
)

__all__ = ["Checkpoint", "CheckpointError", "load_checkpoint", "save_checkpoint"]

FORMAT = "assay.checkpoint/1"
POINTER_BYTES = 4096  # ``latest`` holds one step folder's name
FINGERPRINTS = ("config", "dataset", "model")  # every checkpoint's manifest names these
# and a newer one these too, compared when both the checkpoint and the run have them (a
# checkpoint written before they existed still resumes)
LATER_FINGERPRINTS = ("tokens", "model_numerics")
# what names the base model: its weights, and the config values that change its forward pass
# (equal weights under other Granite multipliers, or another family, are another model)
MODEL_FINGERPRINTS = ("model", "model_numerics")
NUMERICS_DIFFER = (
    "a config.json value that changes the forward pass differs: the family, a size, a norm "
    "epsilon, the rope, the window or Granite's multipliers"
)


def _to_dict(value: Any) -> Any:
    return value.to_dict() if hasattr(value, "to_dict") else value


def _tensors_bytes(tensors: Mapping[str, Tensor]) -> bytes:
    return st_save({k: v.detach().cpu().contiguous() for k, v in tensors.items()})


def model_fingerprints(base: Any) -> dict[str, str]:
    """The fingerprints of MODEL_FINGERPRINTS for the loaded base model ``base``."""
    return {
        "model": base.fingerprint.canonical_sha256,
        "model_numerics": base.config.numerics_sha256(),
    }


def other_model(saved: Mapping[str, str], base: Any) -> str | None:
    """What a checkpoint whose fingerprints are ``saved`` was trained on when that is not
    ``base`` (None when it is): another model's weights, or the same weights under a config
    that computes otherwise (compared when the checkpoint recorded it)."""
    ours = model_fingerprints(base)
    if saved.get("model") != ours["model"]:
        return (
            f"another model (sha256 {str(saved.get('model'))[:12]}; the one given "
            f"{ours['model'][:12]})"
        )
    if "model_numerics" in saved and saved["model_numerics"] != ours["model_numerics"]:
        return f"the same weights under another config ({NUMERICS_DIFFER})"
    return None


def _check_fingerprints(fingerprints: Mapping[str, str]) -> dict[str, str]:
    keys = set(fingerprints)
    if not set(FINGERPRINTS) <= keys <= {*FINGERPRINTS, *LATER_FINGERPRINTS} or not all(
        isinstance(v, str) and v for v in fingerprints.values()
    ):
        raise ValueError(
            f"fingerprints must map {FINGERPRINTS} (and perhaps {LATER_FINGERPRINTS}) to "
            "non-empty strings"
        )
    return dict(fingerprints)


def read_latest(run_dir: Path) -> Path:
    """The checkpoint directory ``run_dir/latest`` names; CheckpointError if unusable."""
    pointer = run_dir / LATEST
    try:
        name = read_capped(pointer, POINTER_BYTES, "checkpoint pointer").decode("utf-8").strip()
    except (OSError, UnicodeDecodeError, InputTooLarge) as exc:
        raise CheckpointError(f"{pointer}: cannot read the latest-checkpoint pointer") from exc
    if not STEP_FOLDER.fullmatch(name):
        raise CheckpointError(f"{pointer}: {name!r} is not a checkpoint name like step-000010")
    return run_dir / name


def finished_at(path: Path, config_sha: str, steps: int) -> Path | None:
    """The checkpoint ``path`` names (a run directory through ``latest``, or a step directory)
    when it already reached ``steps`` under the config whose fingerprint is ``config_sha`` and
    every file verifies against its manifest (CheckpointError naming the file otherwise); None
    when it did not reach them, or when the pointer or manifest cannot tell (the resume
    itself then says what is wrong). Writes nothing."""
    try:
        directory = read_latest(path) if (path / LATEST).exists() else path
        manifest = _read_manifest(directory)
    except CheckpointError:
        return None
    if manifest["fingerprints"].get("config") != config_sha or manifest["step"] != steps:
        return None  # not there yet, or past the end (refused by the resume's field checks)
    _verified(directory, manifest)
    return directory


def save_checkpoint(
    run_dir: str | os.PathLike[str],
    step: int,
    model_trainables: Mapping[str, Tensor],
    optimizer: torch.optim.Optimizer,
    scheduler_state: Mapping[str, Any],
    cursor: Any,
    fingerprints: Mapping[str, str],
) -> Path:
    """Write checkpoint ``step`` under ``run_dir`` atomically and point ``latest`` at it.

    ``model_trainables`` maps names to the very tensors the optimizer updates. ``cursor`` is a
    JSON mapping or has ``to_dict()``. RNG states are captured at call time. Leftovers of
    earlier interrupted saves are removed first. Returns the checkpoint directory.
    """
    root = Path(run_dir)
    prints = _check_fingerprints(fingerprints)
    final = root / step_dirname(step)
    if (root / LATEST).is_file() and read_latest(root) == final and final.exists():
        raise CheckpointError(f"{final}: is the latest checkpoint; refusing to overwrite it")
    foreign = not_in_a_checkpoint(final) if final.exists() or final.is_symlink() else []
    if foreign:  # a save replaces only a checkpoint an earlier save wrote
        raise CheckpointError(
            f"{final}: holds what a checkpoint save does not write ({', '.join(foreign[:3])}); "
            "it would be replaced; move it away"
        )
    remove_stale_temporaries(root)
    names = {id(t): name for name, t in model_trainables.items()}
    opt_tensors, opt_meta = optimizer_to_files(optimizer, names)
    rng_tensors, rng_meta = capture_rng()
    payload = {
        "trainables.safetensors": _tensors_bytes(model_trainables),
        "optimizer.safetensors": _tensors_bytes(opt_tensors),
        "optimizer.json": json_bytes(opt_meta),
        "rng.safetensors": _tensors_bytes(rng_tensors),
        "rng.json": json_bytes(rng_meta),
        "scheduler.json": json_bytes(dict(scheduler_state)),
        "cursor.json": json_bytes(_to_dict(cursor)),
    }
    manifest = {
        "format": FORMAT,
        "step": step,
        "fingerprints": prints,
        "files": {
            name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
            for name, data in payload.items()
        },
    }
    with staged_directory(final, replace=True) as staging:
        for name, data in payload.items():
            write_synced(staging / name, data)
        write_synced(staging / MANIFEST, json_bytes(manifest))
    atomic_write_bytes(root / LATEST, f"{final.name}\n".encode())
    return final


@dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint in memory. :meth:`restore` puts it back into live objects."""

    path: Path
    step: int
    fingerprints: dict[str, str]
    trainables: dict[str, Tensor]
    optimizer_tensors: dict[str, Tensor]
    optimizer_meta: dict[str, Any]
    rng_tensors: dict[str, Tensor]
    rng_meta: dict[str, Any]
    scheduler_state: dict[str, Any]
    cursor: dict[str, Any]

    def restore(
        self,
        params: Mapping[str, Tensor],
        optimizer: torch.optim.Optimizer | None = None,
        *,
        rng: bool = True,
    ) -> None:
        """Copy trainables into ``params`` (same names, shapes, dtypes), load the optimizer
        built over them, and (unless ``rng`` is False) set every random generator."""
        if set(params) != set(self.trainables):
            missing = sorted(set(self.trainables) - set(params))
            extra = sorted(set(params) - set(self.trainables))
            raise CheckpointError(
                f"{self.path}: trainables differ (missing here: {missing[:3]}, "
                f"not in checkpoint: {extra[:3]})"
            )
        for name, saved in self.trainables.items():
            live = params[name]
            if live.shape != saved.shape or live.dtype != saved.dtype:
                raise CheckpointError(
                    f"{self.path}: {name} is {tuple(saved.shape)} {saved.dtype} in the "
                    f"checkpoint, {tuple(live.shape)} {live.dtype} here"
                )
            with torch.no_grad():
                live.copy_(saved)
        if optimizer is not None:
            names = {id(t): name for name, t in params.items()}
            optimizer_from_files(
                optimizer, names, self.optimizer_tensors, self.optimizer_meta, str(self.path)
            )
        if rng:
            restore_rng(self.rng_tensors, self.rng_meta, str(self.path))


def _verified(directory: Path, manifest: Mapping[str, Any]) -> dict[str, bytes]:
    contents: dict[str, bytes] = {}
    for name in CHECKPOINT_FILES:
        entry = manifest["files"].get(name)
        if entry is None:
            raise CheckpointError(f"{directory / MANIFEST}: lists no {name}")
        path = directory / name
        try:  # never more than the manifest promises: a file grown to gigabytes is refused
            data = read_capped(path, entry["bytes"], "checkpoint file")
        except InputTooLarge as exc:
            raise CheckpointError(f"{exc} (the manifest's size)") from None
        except FileNotFoundError as exc:
            raise CheckpointError(f"{path}: missing checkpoint file") from exc
        if len(data) != entry["bytes"]:
            raise CheckpointError(
                f"{path}: {len(data)} bytes, the manifest says {entry['bytes']} (truncated?)"
            )
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise CheckpointError(f"{path}: sha256 differs from the manifest (corrupted)")
        contents[name] = data
    return contents


def _read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST
    try:
        manifest = parse_json(read_capped(path, JSON_BYTES, "checkpoint manifest"))
    except InputTooLarge as exc:
        raise CheckpointError(str(exc)) from None
    except FileNotFoundError as exc:
        raise CheckpointError(f"{path}: missing (not a complete checkpoint)") from exc
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: unreadable manifest ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an {FORMAT} manifest")
    files, step = manifest.get("files"), manifest.get("step")
    if not isinstance(files, dict) or not all(
        isinstance(e, dict) and isinstance(e.get("sha256"), str) and isinstance(e.get("bytes"), int)
        for e in files.values()
    ):
        raise CheckpointError(f"{path}: manifest field 'files' is missing or malformed")
    if not isinstance(manifest.get("fingerprints"), dict):
        raise CheckpointError(f"{path}: manifest field 'fingerprints' is missing or malformed")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointError(f"{path}: manifest field 'step' is not a non-negative integer")
    return manifest


def load_checkpoint(
    path: str | os.PathLike[str], *, fingerprints: Mapping[str, str] | None = None
) -> Checkpoint:
    """Read and verify a checkpoint: a run directory (follows ``latest``) or a step directory.

    Every file's size and sha256 are checked against the manifest before parsing. With
    ``fingerprints`` given, a checkpoint whose config, dataset or model fingerprint differs is
    refused with a CheckpointError naming each that differs. Each error is one line that
    names the offending file.
    """
    where = Path(path)
    directory = read_latest(where) if (where / LATEST).exists() else where
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such checkpoint directory")
    manifest = _read_manifest(directory)
    saved = manifest["fingerprints"]
    if fingerprints is not None:
        wanted = _check_fingerprints(fingerprints)
        compared = [*FINGERPRINTS, *(k for k in LATER_FINGERPRINTS if k in saved and k in wanted)]
        differ = [k for k in compared if saved.get(k) != wanted[k]]
        if differ:
            detail = "; ".join(
                f"{k} fingerprint differs (checkpoint {str(saved.get(k))[:12]}, "
                f"now {wanted[k][:12]}{': ' + NUMERICS_DIFFER if k == 'model_numerics' else ''})"
                for k in differ
            )
            raise CheckpointError(f"{directory}: {detail}; refusing to resume")
    files = _verified(directory, manifest)
    try:
        tensors = {n: st_load(files[n]) for n in CHECKPOINT_FILES if n.endswith(".safetensors")}
        meta = {n: parse_json(files[n]) for n in CHECKPOINT_FILES if n.endswith(".json")}
    except Exception as exc:  # verified bytes that still fail to parse: a bad writer
        raise CheckpointError(f"{directory}: cannot parse checkpoint files ({exc})") from exc
    return Checkpoint(
        path=directory,
        step=int(manifest["step"]),
        fingerprints=dict(saved),
        trainables=tensors["trainables.safetensors"],
        optimizer_tensors=tensors["optimizer.safetensors"],
        optimizer_meta=meta["optimizer.json"],
        rng_tensors=tensors["rng.safetensors"],
        rng_meta=meta["rng.json"],
        scheduler_state=meta["scheduler.json"],
        cursor=meta["cursor.json"],
    )
