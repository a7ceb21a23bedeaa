"""The two sides of ``assay compare``: each a receipts folder, a records folder, one receipt
file, or a git revision whose ``records/receipts`` is read from git (no checkout).

A git side is copied, file by file through ``git cat-file``, into a temporary folder that lives
as long as the :class:`Side`; each blob is size-checked before it is read, so a revision holding
a huge file is refused, never loaded. Nothing on either side is executed or unpickled.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.errors import AssayError
from assay.qualify.core.source import git_output
from assay.qualify.ledger.receipt import read_receipt

RECEIPTS_IN_TREE = "records/receipts"
BLOB_BYTES = 64 << 20  # one receipt, LEDGER or CORRECTIONS file read from git
BLOBS = 50_000  # files under records/receipts at one revision


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
    commit = git_output(root, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if not commit:
        raise AssayError(
            f"{which} {revision}: no such folder or file, and not a git revision of {root}"
        )
    commit = commit.strip()
    listing = git_output(root, "ls-tree", "-r", "-z", "--long", commit, "--", RECEIPTS_IN_TREE)
    if listing is None:
        raise AssayError(f"{which} {revision}: git could not list {RECEIPTS_IN_TREE}")
    entries = [e for e in listing.split("\0") if e]
    if not entries:
        raise AssayError(f"{which} {revision}: no {RECEIPTS_IN_TREE} at {commit[:12]}")
    if len(entries) > BLOBS:
        raise AssayError(f"{which} {revision}: over {BLOBS:,} files under {RECEIPTS_IN_TREE}")
    keep = tempfile.TemporaryDirectory(prefix="assay-compare-")
    folder = Path(keep.name) / "receipts"
    try:
        for entry in entries:
            meta, _, name = entry.partition("\t")
            mode, kind, blob, size = meta.split()
            relative = Path(name).relative_to(RECEIPTS_IN_TREE)
            if kind != "blob" or mode == "120000" or ".." in relative.parts:
                continue  # links and submodules are not receipts
            if int(size) > BLOB_BYTES:
                raise AssayError(f"{which} {revision}: {name} is {int(size):,} bytes; the limit "
                                 f"is {BLOB_BYTES:,}")  # fmt: skip
            try:
                text = git_output(root, "cat-file", "blob", blob)
            except UnicodeDecodeError:
                raise AssayError(f"{which} {revision}: {name} is not UTF-8 text") from None
            if text is None:
                raise AssayError(f"{which} {revision}: git could not read {name}")
            target = folder / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, "utf-8")
    except BaseException:
        keep.cleanup()
        raise
    return Side(f"{revision} ({commit[:12]})", receipts_dir=folder, keep=keep)


@contextlib.contextmanager
def opened(old: str, new: str, root: Path):
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
