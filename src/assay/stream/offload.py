"""Load a model straight into the disk tier, one layer at a time, for models larger than RAM.

Each layer is decoded, packed by its storage, given its adapters, written to its shard and
dropped (its base tensors become ``meta`` placeholders) before the next layer is decoded, so
the load's peak is one dense layer plus the embeddings and head, whatever the depth. The
shards go to a staging folder while their bytes are hashed; at the end they are published
under the content key's name (``ContentHash``, the key a resident-built disk store gets),
replacing any store already there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from assay.model.decoder import Decoder
from assay.model.loader import Fingerprint
from assay.model.tensors import set_tensor
from assay.stream.layout import LayerLayout, base_tensors
from assay.stream.store import (
    ContentHash,
    DiskStore,
    shard_path,
    write_manifest,
    write_shard,
)

LayerAdapter = Callable[[int, nn.Module], object]


class ShardWriter:
    """Layer shards written into a staging folder under ``root`` as they come, then published
    under their content key by ``finish``; ``discard`` removes the staging folder."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
        self.content = ContentHash()
        self.layouts: list[LayerLayout] = []

    def add(self, tensors: dict[str, torch.Tensor]) -> None:
        layout = LayerLayout.of(tensors)
        self.content.add(tensors)
        write_shard(self.staging, len(self.layouts), layout, tensors, key=None)
        self.layouts.append(layout)

    def finish(self) -> DiskStore:
        """The store of the layers added, published under their content key. The fresh shards
        replace whatever is there, a file at a time by rename and the manifest last, so a store
        damaged after it was written (same length, other bytes) is repaired, never served."""
        key = self.content.hexdigest()
        final = self.root / key[:32]
        write_manifest(self.staging, key, len(self.layouts))
        if final.is_symlink() or (final.exists() and not final.is_dir()):
            final.unlink()
        try:
            os.rename(self.staging, final)  # nothing (or an empty folder) there yet
        except OSError:
            (final / "manifest.json").unlink(missing_ok=True)
            for index in range(len(self.layouts)):
                os.replace(shard_path(self.staging, index), shard_path(final, index))
            os.replace(self.staging / "manifest.json", final / "manifest.json")
            self.discard()
        return DiskStore(self.root, key, self.layouts, None)

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def _to_meta(layer: nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Replace the layer's base ``tensors`` by meta placeholders of the same shape, dtype and
    requires_grad, so the layer's bytes live only in its shard."""
    for name, source in tensors.items():
        placeholder = torch.empty(source.shape, dtype=source.dtype, device="meta")
        set_tensor(layer, name, placeholder.requires_grad_(source.requires_grad))


def load_into_disk_tier(
    path: str | os.PathLike[str],
    *,
    storage: str = "float32",
    adapt: LayerAdapter | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> tuple[Decoder, DiskStore, Fingerprint]:
    """(the model with every layer's base on disk, its disk store, its fingerprint).

    ``adapt(index, layer)`` runs on each packed layer before it is written (adapters that
    read the base weights, DoRA's norms or TinyLoRA's SVD, see them); the embeddings, final
    norm, head and every adapter tensor stay in memory. Hand both to
    ``StreamedModel(model, tier="disk", store=store)``.
    """
    from assay.storage.load import load_stored
    from assay.stream.engine import default_cache_dir

    writer = ShardWriter(Path(cache_dir or default_cache_dir()))
    seen = 0

    def offload(layer: nn.Module) -> None:
        nonlocal seen
        if adapt is not None:
            adapt(seen, layer)
        seen += 1
        tensors = base_tensors(layer)
        writer.add(tensors)
        _to_meta(layer, tensors)

    try:
        model, fingerprint = load_stored(path, storage=storage, device=None, then=offload)
        store = writer.finish()
    except BaseException:
        with contextlib.suppress(OSError):
            writer.discard()
        raise
    return model, store, fingerprint
