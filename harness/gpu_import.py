"""Bring receipts back from a GPU box into records/: each joins its gate's ledger beside the CPU
receipts, and the records are rendered again.

Usage: python harness/gpu_import.py RETURNED_RECEIPTS_DIR [--receipts records/receipts]
                                    [--records records] [--no-render]

Every returned receipt is read with the same validation ``assay verify`` applies (schema,
sha256, verdicts); an invalid one stops the import before anything is copied, with one line
naming the file. A valid receipt is written append-only under ``<receipts>/<gate>/`` with the
file name its content determines; one already there byte-identical is skipped, and a different
file at that name is refused. Exit 0 ok, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def import_receipts(source: Path, receipts: Path) -> tuple[list[Path], list[Path]]:
    """Copy valid receipts from ``source`` (``<gate>/*.json``) to ``receipts``; returns
    (written, already present). AssayError names the first invalid or conflicting file."""
    from assay.errors import AssayError
    from assay.qualify.receipt import (
        dump_receipt,
        read_receipt,
        receipt_filename,
        receipt_paths,
        write_atomic,
    )

    found = receipt_paths(source)
    if not found:
        raise AssayError(f"{source}: no receipts (<gate>/*.json) here")
    checked = []
    for path in found:
        receipt = read_receipt(path)
        if receipt["gate"] != path.parent.name:
            raise AssayError(
                f"{path}: receipt of gate {receipt['gate']!r} filed under another gate"
            )
        checked.append(receipt)
    written, present = [], []
    for receipt in checked:
        target = receipts / receipt["gate"] / receipt_filename(receipt)
        data = dump_receipt(receipt)
        if target.exists():
            if target.read_bytes() != data:
                raise AssayError(f"{target}: exists with different content; not overwritten")
            present.append(target)
            continue
        write_atomic(target, data, overwrite=False)
        written.append(target)
    return written, present


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python harness/gpu_import.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("source", type=Path, help="the receipts folder that came back")
    parser.add_argument("--receipts", type=Path, default=ROOT / "records" / "receipts")
    parser.add_argument("--records", type=Path, default=None, help="default: parent of --receipts")
    parser.add_argument("--no-render", action="store_true")
    args = parser.parse_args(argv)
    from assay.errors import AssayError
    from assay.qualify import render_all

    try:
        written, present = import_receipts(args.source, args.receipts)
        if not args.no_render:
            render_all(args.receipts, args.records or args.receipts.parent)
    except AssayError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for path in written:
        print(f"imported {path}")
    if present:
        print(f"{len(present)} already present")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
