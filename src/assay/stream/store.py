"""Host stores for streamed layers: one RAM arena, or per-layer safetensors shards on disk.

Both hand out a layer as one contiguous uint8 block laid out by ``LayerLayout``, so a fetch
into a device slot is a single copy.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import cast

import torch
from safetensors.torch import save_file

from assay.atomic import fsync_file
from assay.errors import AssayError, ModelFileError
from assay.model.safetensors import check_safetensors_header
from assay.stream.layout import LayerLayout

# what reading a shard's header raises on a shard that does not hold a valid one
SHARD_ERRORS = (OSError, ModelFileError, KeyError, TypeError, ValueError)


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
    """Per-layer safetensors shards, written once per (model, storage, layout), read with pread.

    A shard holds one uint8 tensor ``block`` (the layer's bytes) and its layout as metadata.
    A directory is reused only when its manifest names the key and its shards' bytes hash to
    that key (``stored_key``): a torn, truncated or bit-flipped shard is rewritten from
    ``layers``, never served. Shards are written to temp names and renamed, and the manifest is
    written last. ``layers=None`` opens a store this process has just published (``ShardWriter``),
    unverified.
    Reads go through the page cache into the slot (``readinto``), never through a mapping, so
    the layers read stay out of the process's resident set: only the slots count.
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
        intact = manifest_matches(manifest, key) and shards_intact(self.directory, len(layouts))
        if layers is None and not intact:
            raise AssayError(f"{self.directory}: no valid stream cache and no tensors to write")
        self.reused = layers is not None and intact and stored_key(self.directory, layouts) == key
        if layers is not None and not self.reused:
            self.directory.mkdir(parents=True, exist_ok=True)
            for i, tensors in enumerate(layers):
                write_shard(self.directory, i, layouts[i], tensors, key)
            write_manifest(self.directory, key, len(layers))
        self._offsets = [self._locate(i) for i in range(len(layouts))]
        self._staging: torch.Tensor | None = None

    def _locate(self, index: int) -> int:
        """Byte offset of layer ``index``'s block in its shard, after checking the shard."""
        path = shard_path(self.directory, index)
        try:
            data_start, start, end = block_span(path)
        except SHARD_ERRORS as error:
            raise AssayError(f"unreadable stream shard: {error}; delete the cache") from None
        if end - start != self.layouts[index].nbytes:
            raise AssayError(
                f"{path}: block holds {end - start} bytes, layout needs "
                f"{self.layouts[index].nbytes}"
            )
        return data_start + start

    def read_into(self, index: int, destination: torch.Tensor, non_blocking: bool) -> None:
        size = self.layouts[index].nbytes
        host = destination.device.type == "cpu"
        if not host and (self._staging is None or self._staging.numel() < size):
            self._staging = torch.empty(
                max(layout.nbytes for layout in self.layouts), dtype=torch.uint8
            )
        # off the host, the staging buffer was made just above
        target = destination[:size] if host else cast(torch.Tensor, self._staging)[:size]
        path = shard_path(self.directory, index)
        # numpy declares the buffer protocol to type checkers for Python 3.12+ only
        view = memoryview(target.numpy()).cast("B")  # type: ignore[arg-type]
        with path.open("rb", buffering=0) as handle:
            handle.seek(self._offsets[index])
            if not read_exactly(handle, view):
                raise AssayError(f"{path}: stream shard ended early (truncated after open)")
        if not host:
            destination[:size].copy_(target, non_blocking=False)

    def describe(self) -> dict[str, object]:
        return {
            "tier": self.tier,
            "bytes": self.nbytes,
            "directory": str(self.directory),
            "reused": self.reused,
        }


def shard_path(directory: Path, index: int) -> Path:
    return directory / f"layer-{index:04d}.safetensors"


def write_shard(
    directory: Path,
    index: int,
    layout: LayerLayout,
    tensors: dict[str, torch.Tensor],
    key: str | None,
) -> None:
    """Layer ``index``'s tensors packed by ``layout`` into its shard: temp file, fsync, rename.
    ``key`` goes into the shard's metadata when it is known before the bytes are (the manifest
    always holds it)."""
    block = torch.zeros(layout.nbytes, dtype=torch.uint8)
    views = layout.views(block)
    for name, tensor in tensors.items():
        views[name].copy_(tensor.detach())
    final = shard_path(directory, index)
    tmp = final.with_suffix(".tmp")
    meta = {"layout": json.dumps(layout.describe())}
    if key is not None:
        meta["key"] = key
    save_file({"block": block}, str(tmp), metadata=meta)
    fsync_file(tmp)
    os.replace(tmp, final)


def write_manifest(directory: Path, key: str, layers: int) -> None:
    """The manifest that makes a shard directory reusable: written last, atomically."""
    manifest = directory / "manifest.json"
    tmp = manifest.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": key, "layers": layers}))
    fsync_file(tmp)
    os.replace(tmp, manifest)


def manifest_matches(manifest: Path, key: str) -> bool:
    try:
        return json.loads(manifest.read_text())["key"] == key
    except (OSError, ValueError, KeyError, TypeError):
        return False


def shards_intact(directory: Path, layers: int) -> bool:
    """Every shard is present with a valid header and as long as it says (a torn one is
    rewritten)."""
    try:
        for i in range(layers):
            block_span(shard_path(directory, i))
    except SHARD_ERRORS:
        return False
    return True


def block_span(path: Path) -> tuple[int, int, int]:
    """(where a shard's data starts, its ``block``'s start and end within the data). The header
    is validated as a model file's is (``check_safetensors_header``: its length fits the file,
    the block's range matches its dtype and shape and lies inside the data), so a torn or
    corrupt shard raises one of SHARD_ERRORS and nothing larger than the file is read."""
    start, end = check_safetensors_header(path)["block"]["data_offsets"]
    with path.open("rb") as handle:
        header_len = int.from_bytes(handle.read(8), "little")
    return 8 + header_len, start, end


def read_exactly(handle, view: memoryview) -> bool:
    """Fill ``view`` from ``handle``'s position; False when the file ends first."""
    done = 0
    while done < len(view):
        got = handle.readinto(view[done:])
        if not got:
            return False
        done += got
    return True


def stored_key(directory: Path, layouts: list[LayerLayout]) -> str | None:
    """The content key of the bytes the shards in ``directory`` hold (what ``ContentHash``
    gives for the tensors they were written from), or None when a shard cannot be read."""
    content = ContentHash()
    block = torch.empty(max((layout.nbytes for layout in layouts), default=0), dtype=torch.uint8)
    try:
        for index, layout in enumerate(layouts):
            path = shard_path(directory, index)
            data_start, start, end = block_span(path)
            if end - start != layout.nbytes:
                return None
            with path.open("rb", buffering=0) as handle:
                handle.seek(data_start + start)
                # numpy declares the buffer protocol to type checkers for Python 3.12+ only
                view = memoryview(block.numpy()).cast("B")[: layout.nbytes]  # type: ignore[arg-type]
                if not read_exactly(handle, view):
                    return None
            content.add(layout.views(block))
    except SHARD_ERRORS:
        return None
    return content.hexdigest()


class ContentHash:
    """sha256 over every streamed byte, layer by layer, so a disk cache can never serve another
    model's bytes; adding the layers one at a time gives the digest of adding them all."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()

    def add(self, tensors: dict[str, torch.Tensor]) -> None:
        for name, tensor in tensors.items():
            self.digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}\0".encode())
            raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
            self.digest.update(raw.numpy().tobytes())

    def hexdigest(self) -> str:
        return self.digest.hexdigest()
