"""A .tar.gz read member by member, every size checked before a byte of it is read.

``tarfile`` reads a GNU long-name or pax header whole, whatever size its header declares,
before any caller sees it, so an archive that declares gigabytes costs gigabytes. This reader
takes only what an archive of receipts needs (regular files, with pax or GNU long names) and
refuses everything else. Guarantees, each checked against :class:`Caps` while streaming and
before allocating: a long name at most ``name_bytes``, a pax header at most ``pax_bytes``, a
member at most ``member_bytes``, all members together at most ``total_bytes``. A corrupt
gzip or deflate stream, a header whose checksum fails, a truncated archive and a member that
is not a regular file are each one :class:`ArchiveError` line naming the archive.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from assay.errors import AssayError

BLOCK = 512
REGULAR = (b"0", b"\0")
PAX, PAX_GLOBAL, GNU_LONGNAME = b"x", b"g", b"L"


class ArchiveError(AssayError):
    """The archive is unreadable, over a cap, or holds something other than plain files."""


@dataclass(frozen=True)
class Caps:
    """What one archive may declare, in bytes."""

    name_bytes: int = 1024
    pax_bytes: int = 64 << 10
    member_bytes: int = 64 << 20
    total_bytes: int = 512 << 20


def _number(field: bytes) -> int:
    """A header number: octal text, or GNU base-256 (high bit set on the first byte)."""
    if field and field[0] & 0x80:
        value = int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
        return -value if field[0] & 0x40 else value
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "replace")


class _Reader:
    def __init__(self, path: Path, handle: BinaryIO, caps: Caps) -> None:
        self.path, self.handle, self.caps = path, handle, caps
        self.total = 0

    def fail(self, why: str) -> ArchiveError:
        return ArchiveError(f"{self.path}: {why}")

    def exactly(self, size: int) -> bytes:
        data = self.handle.read(size)
        if len(data) != size:
            raise self.fail("truncated archive (ends inside a member)")
        return data

    def body(self, size: int, cap: int, what: str) -> bytes:
        """``size`` bytes of a member's data (padding skipped), refused past ``cap``."""
        if size < 0:
            raise self.fail(f"{what} declares a negative size")
        if size > cap:
            raise self.fail(f"{what} declares {size:,} bytes; the limit is {cap:,}")
        data = self.exactly(size)
        self.exactly(-size % BLOCK)
        return data

    def header(self) -> tuple[str, bytes, int] | None:
        """(name, type, size) of the next header; None at the end of the archive."""
        block = self.handle.read(BLOCK)
        if not block or block == bytes(BLOCK):
            return None
        if len(block) != BLOCK:
            raise self.fail("truncated archive (ends inside a header)")
        try:
            stored = _number(block[148:156])
            size = _number(block[124:136])
        except ValueError:
            raise self.fail("corrupt tar header (a number field is not a number)") from None
        blank = block[:148] + b" " * 8 + block[156:]
        if stored not in (sum(blank), sum(b - 256 if b > 127 else b for b in blank)):
            raise self.fail("corrupt tar header (checksum)")
        name = _text(block[0:100])
        if block[257:262] == b"ustar" and block[345:500].strip(b"\0"):
            name = f"{_text(block[345:500])}/{name}"
        return name, block[156:157], size

    def pax(self, size: int) -> dict[str, str]:
        """The records of a pax header (``LEN key=value\\n`` each)."""
        data = self.body(size, self.caps.pax_bytes, "a pax header")
        records: dict[str, str] = {}
        at = 0
        while at < len(data):
            space = data.find(b" ", at)
            try:
                length = int(data[at:space]) if space > at else 0
            except ValueError:
                length = 0
            if length <= space - at or at + length > len(data):
                raise self.fail("corrupt pax header")
            key, _, value = data[space + 1 : at + length - 1].partition(b"=")
            records[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
            at += length
        return records

    def members(self) -> Iterator[tuple[str, bytes]]:
        override: dict[str, str] = {}
        while True:
            found = self.header()
            if found is None:
                return
            name, kind, size = found
            if kind == PAX:
                override.update(self.pax(size))
                continue
            if kind == PAX_GLOBAL:
                self.pax(size)  # read within its cap, then ignored: names come per member
                continue
            if kind == GNU_LONGNAME:
                override["path"] = _text(self.body(size, self.caps.name_bytes, "a long name"))
                continue
            name = override.pop("path", name)
            if "size" in override:
                try:
                    size = int(override.pop("size"))
                except ValueError:
                    raise self.fail(f"member {name[:200]!r}: pax size is not a number") from None
            override.clear()
            if len(name.encode("utf-8")) > self.caps.name_bytes:
                raise self.fail(f"a member name is over {self.caps.name_bytes:,} bytes")
            if kind not in REGULAR:
                raise self.fail(f"member {name!r} is not a plain, safe, new file")
            if size > self.caps.total_bytes - self.total:
                raise self.fail(f"unpacks to over {self.caps.total_bytes >> 20} MiB")
            data = self.body(size, self.caps.member_bytes, f"member {name!r}")
            self.total += size
            yield name, data


def read_members(path: Path, caps: Caps = Caps()) -> Iterator[tuple[str, bytes]]:
    """Yield ``(name, data)`` for each member of the .tar.gz at ``path``, in archive order,
    with every cap of ``caps`` enforced before the bytes it bounds are read; ArchiveError (one
    line naming ``path``) for anything unreadable, over a cap or not a regular file."""
    path = Path(path)
    if not path.is_file():
        raise ArchiveError(f"{path}: not a file" if path.exists() else f"{path}: no such file")
    if path.stat().st_size > caps.total_bytes:
        raise ArchiveError(f"{path}: over {caps.total_bytes >> 20} MiB")
    try:
        with gzip.open(path, "rb") as handle:
            yield from _Reader(path, handle, caps).members()  # type: ignore[arg-type]
            # read past the tar's end to the gzip trailer: its CRC and length are checked
            # there, and anything after the stream is refused
            left = caps.total_bytes
            while chunk := handle.read(min(1 << 20, left + 1)):
                left -= len(chunk)
                if left < 0:
                    raise ArchiveError(f"{path}: over {caps.total_bytes >> 20} MiB unpacked")
    except (OSError, EOFError, zlib.error) as err:
        raise ArchiveError(f"{path}: not a readable .tar.gz ({err})") from None
