"""Optimizer and RNG state as safetensors tensors plus JSON, so checkpoints need no pickle.

Optimizer state (any torch optimizer whose per-parameter state is tensors and JSON scalars,
AdamW included) is keyed by parameter NAME, not by position, so a restore into fresh objects
checks that the same parameters are being optimized. Floats go through JSON's shortest
round-trip repr and tensors through safetensors, so both come back bit for bit.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from assay.errors import AssayError


class CheckpointError(AssayError):
    """A checkpoint is missing, corrupt, or does not match the run that would resume from it."""


def _plain(value: Any, where: str) -> Any:
    if isinstance(value, tuple):
        return [_plain(v, where) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise CheckpointError(f"{where}: cannot store {type(value).__name__} value {value!r}")


def optimizer_to_files(
    optimizer: torch.optim.Optimizer, names: Mapping[int, str]
) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """``(tensors, meta)`` for an optimizer; ``names`` maps ``id(param)`` to its name."""
    tensors: dict[str, Tensor] = {}
    groups: list[dict[str, Any]] = []
    scalars: dict[str, dict[str, Any]] = {}
    for g, group in enumerate(optimizer.param_groups):
        entry: dict[str, Any] = {"param_names": []}
        for key, value in group.items():
            if key == "params":
                continue
            if isinstance(value, Tensor):
                tensors[f"group/{g}/{key}"] = value.detach().cpu().contiguous()
            else:
                entry[key] = _plain(value, f"optimizer param_groups[{g}].{key}")
        for param in group["params"]:
            if id(param) not in names:
                raise CheckpointError(
                    f"optimizer param_groups[{g}] holds a {tuple(param.shape)} parameter that "
                    "is not among the named trainables"
                )
            name = names[id(param)]
            entry["param_names"].append(name)
            for key, value in optimizer.state.get(param, {}).items():
                if isinstance(value, Tensor):
                    tensors[f"state/{name}/{key}"] = value.detach().cpu().contiguous()
                else:
                    scalars.setdefault(name, {})[key] = _plain(value, f"state {name}.{key}")
        groups.append(entry)
    meta = {"class": type(optimizer).__name__, "param_groups": groups, "scalars": scalars}
    return tensors, meta


def optimizer_from_files(
    optimizer: torch.optim.Optimizer,
    names: Mapping[int, str],
    tensors: Mapping[str, Tensor],
    meta: Mapping[str, Any],
    source: str,
) -> None:
    """Load saved state into ``optimizer`` built over the same named parameters.

    Raises CheckpointError (naming ``source``) for another optimizer class or a different
    grouping or ordering of parameters.
    """
    if meta["class"] != type(optimizer).__name__:
        raise CheckpointError(
            f"{source}: saved optimizer is {meta['class']}, not {type(optimizer).__name__}"
        )
    saved_groups = meta["param_groups"]
    current = [[names.get(id(p), "?") for p in g["params"]] for g in optimizer.param_groups]
    if [g["param_names"] for g in saved_groups] != current:
        raise CheckpointError(f"{source}: optimizer parameters differ from the saved ones")
    state: dict[int, dict[str, Any]] = {}
    groups: list[dict[str, Any]] = []
    index = 0
    for g, saved in enumerate(saved_groups):
        # a setting the checkpoint lacks is the config's (the fresh group's), never torch's default
        group = {k: v for k, v in optimizer.param_groups[g].items() if k != "params"}
        group.update({k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()})
        del group["param_names"]
        for key, value in tensors.items():
            if key.startswith(f"group/{g}/"):
                group[key.split("/", 2)[2]] = value.clone()
        group["params"] = []
        for name in saved["param_names"]:
            entry = dict(meta["scalars"].get(name, {}))
            prefix = f"state/{name}/"
            entry.update({k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)})
            if entry:
                state[index] = entry
            group["params"].append(index)
            index += 1
        groups.append(group)
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def capture_rng() -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Torch CPU (and every CUDA device's) generator as uint8 tensors; numpy and python as JSON."""
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda/{i}"] = state
    np_state = np.random.get_state(legacy=False)
    np_json = dict(np_state)
    np_json["state"] = {
        "key": np_state["state"]["key"].tolist(),
        "pos": int(np_state["state"]["pos"]),
    }
    version, internal, gauss = random.getstate()
    meta = {"numpy": np_json, "python": [version, list(internal), gauss]}
    return tensors, meta


def restore_rng(tensors: Mapping[str, Tensor], meta: Mapping[str, Any], source: str) -> None:
    """Set every generator captured by :func:`capture_rng`.

    CUDA states are restored when CUDA is available with the same device count; a CUDA
    checkpoint resumed without CUDA, or with another count, raises CheckpointError.
    """
    torch.set_rng_state(tensors["torch_cpu"].clone())
    cuda = [tensors[k] for k in sorted(tensors) if k.startswith("torch_cuda/")]
    if cuda:
        if not torch.cuda.is_available() or torch.cuda.device_count() != len(cuda):
            raise CheckpointError(
                f"{source}: saved {len(cuda)} CUDA generator(s); this process has "
                f"{torch.cuda.device_count() if torch.cuda.is_available() else 0}"
            )
        torch.cuda.set_rng_state_all([t.clone() for t in cuda])
    np_state = dict(meta["numpy"])
    np_state["state"] = {
        "key": np.asarray(np_state["state"]["key"], dtype=np.uint32),
        "pos": np_state["state"]["pos"],
    }
    np.random.set_state(np_state)
    version, internal, gauss = meta["python"]
    random.setstate((version, tuple(internal), gauss))
