"""A GGUF file's seal: the sha256 of the whole file, stored in one of its own metadata strings.

A file cannot hold its own hash, so the seal is the hash of the file with the seal's value
taken as :data:`PLACEHOLDER` (64 zeros). A writer adds the key with the placeholder
(:func:`placeholder_metadata`), writes the file, then :func:`seal` puts the hash in the
placeholder's place, before the file is renamed into place. :func:`seal_holds` tells whether a
file is byte for byte what was sealed: any edit (a metadata value, a tensor byte, bytes
appended) breaks it. Nothing here trusts the file: the key is found by its exact encoding, and
must occur once.
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path
from typing import Any

from assay.digest import feed

PLACEHOLDER = "0" * 64
_STRING = 8  # GGUF's value type of a string
_SEARCHED = 64 << 20  # the metadata comes first: the key is found within this many bytes


def placeholder_metadata(key: str) -> dict[str, Any]:
    """The ``extra_metadata`` entry for :func:`assay.model.gguf_export.write_gguf` that holds
    the seal's place under ``key``."""
    from gguf import GGUFValueType

    return {key: (PLACEHOLDER, GGUFValueType.STRING)}


def _encoded(key: str) -> bytes:
    raw = key.encode()
    return struct.pack("<Q", len(raw)) + raw + struct.pack("<IQ", _STRING, len(PLACEHOLDER))


def _value_offset(path: Path, key: str) -> int | None:
    """The byte offset of ``key``'s 64-byte string value in ``path``, or None when the key's
    encoding is not found exactly once in the file's first bytes."""
    with open(path, "rb") as handle:
        head = handle.read(_SEARCHED)
    pattern = _encoded(key)
    at = head.find(pattern)
    if at < 0 or head.find(pattern, at + 1) >= 0:
        return None
    return at + len(pattern)


def _digest(path: Path, offset: int) -> str:
    """sha256 of ``path`` with the 64 bytes at ``offset`` read as the placeholder."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        feed(digest, handle, offset)
        digest.update(PLACEHOLDER.encode())
        handle.seek(offset + len(PLACEHOLDER))
        feed(digest, handle)
    return digest.hexdigest()


def seal(path: Path, key: str) -> None:
    """Write the seal into the placeholder under ``key`` of the file at ``path`` (not yet
    renamed into place). ValueError when the file holds no such placeholder."""
    offset = _value_offset(path, key)
    if offset is None:
        raise ValueError(f"{path}: no {key} placeholder to seal")
    value = _digest(path, offset).encode()
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, value, offset)
    finally:
        os.close(fd)


def seal_holds(path: Path, key: str) -> bool:
    """True when the file at ``path`` carries a seal under ``key`` and is byte for byte the
    file that was sealed."""
    offset = _value_offset(path, key)
    if offset is None:
        return False
    with open(path, "rb") as handle:
        handle.seek(offset)
        stored = handle.read(len(PLACEHOLDER))
    return stored == _digest(path, offset).encode()
