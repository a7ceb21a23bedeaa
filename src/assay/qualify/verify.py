"""Verification: receipts are schema-valid and untampered, and records match their receipts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from assay.faultpoints import armed, declare
from assay.qualify.assemble import check_corrections
from assay.qualify.gate import file_sha256
from assay.qualify.receipt import SHA_FIELD, problems_in, receipt_filename, receipt_paths
from assay.qualify.render import GATE_DIR, record_path, render_text

NEWEST_ONLY = declare(
    "qualify.verify.newest_receipt_only",
    "verify checks only the newest receipt of a gate",
)
RECORD_UNCHECKED = declare(
    "qualify.verify.record_not_compared",
    "verify does not compare a record with a fresh render",
)

RECORD_MARK = "# Gate record: "


def _check_file(path: Path, gate: str) -> tuple[dict[str, Any] | None, list[str]]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return None, [f"{path}: not readable JSON ({err})"]
    problems = []
    for p in problems_in(data):
        kind = "sha256 mismatch" if p.startswith(SHA_FIELD) else "schema invalid"
        problems.append(f"{path}: {kind}: {p}")
    if problems:
        return None, problems
    if data["gate"] != gate:
        problems.append(f"{path}: receipt of gate {data['gate']!r} filed under {gate!r}")
    if path.name != receipt_filename(data):
        problems.append(
            f"{path}: file name does not match its content (expected {receipt_filename(data)})"
        )
    return (data if not problems else None), problems


def _check_figures(path: Path, receipt: dict[str, Any], records_dir: Path) -> list[str]:
    problems = []
    for fig in receipt["figures"]:
        target = records_dir / fig["path"]
        if not target.is_file():
            problems.append(f"{path}: figure {fig['path']} is missing from {records_dir}")
        elif file_sha256(target) != fig["sha256"]:
            problems.append(f"{target}: figure sha256 differs from receipt {path.name}")
    return problems


def verify_gate(gate: str, receipts_dir: Path, records_dir: Path) -> list[str]:
    """Problems for one gate's receipts and its record, one line each naming the file."""
    problems: list[str] = []
    valid: list[tuple[Path, dict[str, Any]]] = []
    paths = receipt_paths(receipts_dir, gate)
    for path in paths[-1:] if armed(NEWEST_ONLY) else paths:
        receipt, found = _check_file(path, gate)
        problems.extend(found)
        if receipt is not None:
            valid.append((path, receipt))
    receipts = [r for _, r in valid]
    for path, receipt in valid:
        problems.extend(f"{path}: {p}" for p in check_corrections(receipt, receipts))
        problems.extend(_check_figures(path, receipt, records_dir))
    record = record_path(records_dir, gate)
    if not record.is_file():
        problems.append(f"{record}: record missing for gate {gate!r} (run `assay render`)")
    elif (
        receipts
        and not armed(RECORD_UNCHECKED)
        and record.read_text("utf-8") != render_text(gate, receipts)
    ):
        problems.append(f"{record}: record out of sync with its receipts (run `assay render`)")
    return problems


def verify_all(receipts_dir: Path, records_dir: Path) -> list[str]:
    """Every problem found, one line each naming the file; an empty list means all is well.

    Checks each receipt (readable, schema-valid, verdicts consistent, sha256 matches its
    content, filed under its gate and named after its content, corrections resolvable,
    figures present and unchanged) and each record (present, equal to a fresh in-memory
    render of the valid receipts; a record without receipts is reported too).
    """
    receipts_dir, records_dir = Path(receipts_dir), Path(records_dir)
    problems: list[str] = []
    gates = set()
    if receipts_dir.is_dir():
        for d in sorted(receipts_dir.iterdir()):
            if not d.is_dir():
                continue
            if not GATE_DIR.match(d.name):
                problems.append(f"{d}: not a gate folder name")
                continue
            if receipt_paths(receipts_dir, d.name):
                gates.add(d.name)
                problems.extend(verify_gate(d.name, receipts_dir, records_dir))
    if records_dir.is_dir():
        for md in sorted(records_dir.glob("*.md")):
            with md.open(encoding="utf-8") as handle:
                first = handle.readline()
            if first.startswith(RECORD_MARK) and md.stem not in gates:
                problems.append(f"{md}: record has no receipts in {receipts_dir}")
    return problems
