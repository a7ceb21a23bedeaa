"""gate-nf4's byte counts for the load-peak claim (not a gate module).

Live bytes are every torch storage and owning numpy array that gc finds; :class:`PeakCensus`
samples them at every storage conversion of a load. :func:`dense_layer_bytes` is the bound's
one dense fp32 layer.
"""

from __future__ import annotations

import gc
import warnings

import numpy as np
import torch

from assay.storage import FrozenLinear, register_storage_hook


def live_bytes(generation: int = 2) -> int:
    """Bytes of every live torch tensor storage (once each) and every numpy array owning data,
    after ``gc.collect(generation)``. A younger generation only ever leaves garbage counted as
    live, so a sample can read high, never low."""
    gc.collect(generation)
    seen: set[tuple[str, int]] = set()
    total = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # isinstance() on deprecated torch aliases warns
        for obj in gc.get_objects():
            if isinstance(obj, np.ndarray) and obj.flags.owndata:
                total += obj.nbytes
            if not isinstance(obj, torch.Tensor) or obj.device.type == "meta":
                continue
            try:
                storage = obj.untyped_storage()
                key = (str(obj.device), storage.data_ptr())
            except (RuntimeError, NotImplementedError):
                continue  # fake / functional tensors own no memory
            if key not in seen:
                seen.add(key)
                total += storage.nbytes()
    return total


class PeakCensus:
    """Live bytes sampled before and after every storage conversion; peak above a baseline."""

    def __init__(self) -> None:
        self.baseline = live_bytes()
        self.samples: list[int] = []
        # Samples collect generations 0-1 only: a full collection per sample cost ~40 s of this
        # gate's CPU time (0.3 s each with transformers imported, 60 per load, two loads).
        self.handle = register_storage_hook(lambda *_: self.samples.append(live_bytes(1)))

    def stop(self) -> int:
        self.handle.remove()
        return max(self.samples) - self.baseline


def dense_layer_bytes(model) -> int:
    """fp32 bytes of the largest decoder layer, from its stores' shapes and its other tensors."""
    sizes = []
    for layer in model.layers:
        total = 0
        for module in layer.modules():
            if isinstance(module, FrozenLinear):
                total += module.in_features * module.out_features * 4
                total += 0 if module.bias is None else module.bias.numel() * 4
            elif not hasattr(module, "store"):
                total += sum(p.numel() * 4 for p in module.parameters(recurse=False))
        sizes.append(total)
    return max(sizes)
