"""The two sides of ``assay compare``: each a receipts folder, a records folder, one receipt
file, or a git revision whose ``records/receipts`` is read from git (no checkout).

A git side is its revision's ``records/receipts`` checked out in a private clone that shares the
repository's objects and lives as long as the :class:`Side`, so it is judged by the same code as
a folder (history, links, odd files); each file's size is checked from git's listing first, so
a revision holding a huge file is refused, never read. Nothing is executed or unpickled.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.errors import AssayError
from assay.qualify.core.git import git_output
from assay.qualify.core.layout import RECEIPTS_FOLDER
from assay.qualify.ledger.receipt import read_receipt

if TYPE_CHECKING:
    from collections.abc import Iterator

BLOB_BYTES = 64 << 20  # one receipt, LEDGER or CORRECTIONS file read from git
BLOBS = 50_000  # files under the receipts folder at one revision


@dataclass
class Side:
    """One side of a comparison: where its receipts are, and how the user named it."""

    label: str
    receipts_dir: Path | None = None  # a folder of <gate>/*.json with LEDGERs
    receipt: dict[str, Any] | None = None  # one receipt file, compared as it is
    keep: Any = field(default=None, repr=False)  # a temporary folder to hold until done

    def gates(self) -> list[str]:
        """The gates this side holds receipts for, sorted."""
        if self.receipt is not None:
            return [self.receipt["gate"]]
        assert self.receipts_dir is not None
        return sorted(
            p.name for p in self.receipts_dir.iterdir() if p.is_dir() and any(p.glob("*.json"))
        )

    def shown(self, message: str) -> str:
        """``message`` with this side's private checkout named as the user named the side."""
        if self.keep is None or self.receipts_dir is None:
            return message
        return message.replace(str(self.receipts_dir), f"{self.label}:{RECEIPTS_FOLDER}")

    def close(self) -> None:
        if self.keep is not None:
            self.keep.cleanup()


def _is_receipts_folder(folder: Path) -> bool:
    return any(folder.glob("*/*.json")) or any(folder.glob("*/LEDGER"))


def open_side(spec: str, which: str, root: Path) -> Side:
    """The side the user named ``spec`` (``which``: OLD or NEW), tried as a path first, then
    as a git revision of the repository at ``root``; AssayError (one line) when it is none."""
    path = Path(spec)
    if path.is_dir():
        if (path / "receipts").is_dir() and not _is_receipts_folder(path):
            path = path / "receipts"  # a records folder
        if not _is_receipts_folder(path):
            raise AssayError(f"{which} {spec}: a folder holding no receipts (<gate>/*.json)")
        return Side(spec, receipts_dir=path)
    if path.is_file():
        return Side(spec, receipt=read_receipt(path))
    if path.exists() or spec.startswith("-"):
        raise AssayError(f"{which} {spec}: not a receipts folder, a receipt file or a revision")
    return _git_side(spec, which, root)


def _git_side(revision: str, which: str, root: Path) -> Side:
    """``revision``'s receipts, checked out (receipts folder only) in a private clone that
    shares the repository's objects, so the folder code path judges them, git history
    included, exactly as ``verify`` would at that revision; the user's tree is not touched."""
    commit = git_output(root, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if not commit:
        raise AssayError(
            f"{which} {revision}: no such folder or file, and not a git revision of {root}"
        )
    commit = commit.strip()
    listing = git_output(root, "ls-tree", "-r", "-z", "--long", commit, "--", RECEIPTS_FOLDER)
    if listing is None:
        raise AssayError(f"{which} {revision}: git could not list {RECEIPTS_FOLDER}")
    entries = [e for e in listing.split("\0") if e]
    if not entries:
        raise AssayError(f"{which} {revision}: no {RECEIPTS_FOLDER} at {commit[:12]}")
    if len(entries) > BLOBS:
        raise AssayError(f"{which} {revision}: over {BLOBS:,} files under {RECEIPTS_FOLDER}")
    for entry in entries:
        meta, _, name = entry.partition("\t")
        size = meta.split()[3]
        if size.isdigit() and int(size) > BLOB_BYTES:
            raise AssayError(
                f"{which} {revision}: {name} is {int(size):,} bytes; the limit is {BLOB_BYTES:,}"
            )
    keep = tempfile.TemporaryDirectory(prefix="assay-compare-")
    clone = Path(keep.name) / "repo"
    steps = (
        (root, ("clone", "-q", "--shared", "--no-checkout", str(root), str(clone))),
        (clone, ("sparse-checkout", "set", "--no-cone", f"/{RECEIPTS_FOLDER}/")),
        (clone, ("checkout", "-q", "--detach", commit)),
    )
    for where, args in steps:
        if git_output(where, *args) is None:
            keep.cleanup()
            raise AssayError(f"{which} {revision}: git could not check out {RECEIPTS_FOLDER}")
    folder = clone / RECEIPTS_FOLDER
    if not folder.is_dir() or folder.is_symlink():
        keep.cleanup()
        raise AssayError(f"{which} {revision}: {RECEIPTS_FOLDER} is not a folder at {commit[:12]}")
    return Side(f"{revision} ({commit[:12]})", receipts_dir=folder, keep=keep)


@contextlib.contextmanager
def opened(old: str, new: str, root: Path) -> Iterator[tuple[Side, Side]]:
    """Both sides, closed (temporary copies removed) however the comparison ends."""
    first = open_side(old, "OLD", root)
    try:
        second = open_side(new, "NEW", root)
        try:
            yield first, second
        finally:
            second.close()
    finally:
        first.close()
