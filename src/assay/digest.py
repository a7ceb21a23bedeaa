"""Streaming sha256 of files: read in chunks, so a model, checkpoint or export of gigabytes is
hashed in constant memory. A base module (no torch), shared by the trainer and the framework."""

from __future__ import annotations

import hashlib
import os
from typing import IO, Any

CHUNK = 1 << 20


def feed(digest: Any, handle: IO[bytes], length: int | None = None) -> int:
    """Update ``digest`` (a hashlib object) with the bytes read from ``handle``: its next
    ``length`` bytes, or all that is left when None. Returns how many were read, fewer than
    ``length`` only at the end of the file."""
    read = 0
    while length is None or read < length:
        block = handle.read(CHUNK if length is None else min(CHUNK, length - read))
        if not block:
            break
        digest.update(block)
        read += len(block)
    return read


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of the file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        feed(digest, handle)
    return digest.hexdigest()
