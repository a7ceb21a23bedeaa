"""Host stores for streamed layers: one RAM arena, or per-layer safetensors shards on disk.

Both hand out a layer as one contiguous uint8 block laid out by ``LayerLayout``, so a fetch
into a device slot is a single copy.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from assay.atomic import fsync_file
from assay.errors import AssayError
from assay.stream.layout import LayerLayout, layouts_key


class RamStore:
    """Every layer's base bytes in one host allocation, pinned when the device is CUDA.

    Guarantees: ``block(i)`` is a uint8 view holding exactly layer i's tensors at its layout's
    offsets. If pinning is refused the arena is pageable and ``pin_error`` says why.
    """

    tier = "ram"

    def __init__(
        self, layouts: list[LayerLayout], layers: list[dict[str, torch.Tensor]], *, pin: bool
    ) -> None:
        self.layouts = layouts
        self.starts = []
        total = 0
        for layout in layouts:
            self.starts.append(total)
            total += layout.nbytes
        self.nbytes = total
        self.pinned, self.pin_error = False, None
        arena = None
        if pin:
            try:
                arena = torch.empty(total, dtype=torch.uint8, pin_memory=True)
                self.pinned = True
            except RuntimeError as err:
                self.pin_error = str(err).splitlines()[0]
        self.arena = arena if arena is not None else torch.empty(total, dtype=torch.uint8)
        for i, tensors in enumerate(layers):
            views = layouts[i].views(self.block(i))
            for name, tensor in tensors.items():
                views[name].copy_(tensor.detach())

    def block(self, index: int) -> torch.Tensor:
        start = self.starts[index]
        return self.arena[start : start + self.layouts[index].nbytes]

    def read_into(self, index: int, destination: torch.Tensor, non_blocking: bool) -> None:
        destination[: self.layouts[index].nbytes].copy_(
            self.block(index), non_blocking=non_blocking
        )

    def describe(self) -> dict[str, object]:
        return {
            "tier": self.tier,
            "bytes": self.nbytes,
            "pinned": self.pinned,
            "pin_error": self.pin_error,
        }


class DiskStore:
    """Per-layer safetensors shards, written once per (model, storage, layout), read via mmap.

    A shard holds one uint8 tensor ``block`` (the layer's bytes) and its layout as metadata.
    A directory whose manifest matches the key is reused as it is; shards are written to temp
    names and renamed, and the manifest is written last, so a torn write is never reused.
    """

    tier = "disk"

    def __init__(
        self,
        root: Path,
        key: str,
        layouts: list[LayerLayout],
        layers: list[dict[str, torch.Tensor]] | None,
    ) -> None:
        self.layouts = layouts
        self.directory = root / key[:32]
        self.nbytes = sum(layout.nbytes for layout in layouts)
        manifest = self.directory / "manifest.json"
        self.reused = self._manifest_matches(manifest, key) and self._shards_intact()
        if not self.reused:
            if layers is None:
                raise AssayError(f"{self.directory}: no valid stream cache and no tensors to write")
            self._write(key, layers, manifest)
        self._maps = [self._map(i) for i in range(len(layouts))]

    def _manifest_matches(self, manifest: Path, key: str) -> bool:
        try:
            return json.loads(manifest.read_text())["key"] == key
        except (OSError, ValueError, KeyError):
            return False

    def _shards_intact(self) -> bool:
        """Every shard is present and as long as its header says (a torn one is rewritten)."""
        try:
            for i in range(len(self.layouts)):
                path = self._shard(i)
                with path.open("rb") as handle:
                    header_len = int.from_bytes(handle.read(8), "little")
                    end = json.loads(handle.read(header_len))["block"]["data_offsets"][1]
                if path.stat().st_size < 8 + header_len + end:
                    return False
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return False
        return True

    def _shard(self, index: int) -> Path:
        return self.directory / f"layer-{index:04d}.safetensors"

    def _write(self, key: str, layers: list[dict[str, torch.Tensor]], manifest: Path) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for i, tensors in enumerate(layers):
            block = torch.zeros(self.layouts[i].nbytes, dtype=torch.uint8)
            views = self.layouts[i].views(block)
            for name, tensor in tensors.items():
                views[name].copy_(tensor.detach())
            tmp = self._shard(i).with_suffix(".tmp")
            meta = {"layout": json.dumps(self.layouts[i].describe()), "key": key}
            save_file({"block": block}, str(tmp), metadata=meta)
            fsync_file(tmp)
            os.replace(tmp, self._shard(i))
        tmp = manifest.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": key, "layers": len(layers)}))
        fsync_file(tmp)
        os.replace(tmp, manifest)

    def _map(self, index: int) -> np.memmap:
        path = self._shard(index)
        try:
            with path.open("rb") as handle:
                header_len = int.from_bytes(handle.read(8), "little")
                header = json.loads(handle.read(header_len))
            start, end = header["block"]["data_offsets"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise AssayError(f"{path}: unreadable stream shard ({error})") from None
        if path.stat().st_size < 8 + header_len + end:
            raise AssayError(f"{path}: stream shard is truncated (torn write); delete the cache")
        if end - start != self.layouts[index].nbytes:
            raise AssayError(
                f"{path}: block holds {end - start} bytes, layout needs "
                f"{self.layouts[index].nbytes}"
            )
        # Copy-on-write mapping: torch wants a writable array, and nothing ever writes to it.
        return np.memmap(
            path, dtype=np.uint8, mode="c", offset=8 + header_len + start, shape=(end - start,)
        )

    def read_into(self, index: int, destination: torch.Tensor, non_blocking: bool) -> None:
        source = torch.from_numpy(self._maps[index])
        destination[: self.layouts[index].nbytes].copy_(source, non_blocking=False)

    def describe(self) -> dict[str, object]:
        return {
            "tier": self.tier,
            "bytes": self.nbytes,
            "directory": str(self.directory),
            "reused": self.reused,
        }


def store_key(fingerprint: str, storage: str, layouts: list[LayerLayout]) -> str:
    """Cache key of a disk store: model fingerprint, storage and the exact byte layout."""
    return f"{fingerprint[:16]}-{storage}-{layouts_key(layouts)[:16]}"
