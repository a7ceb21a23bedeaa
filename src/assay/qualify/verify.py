"""Verification: receipts are schema-valid and untampered, and records match their receipts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from assay.errors import AssayError
from assay.faultpoints import armed, declare
from assay.qualify.assemble import check_corrections
from assay.qualify.chain import check_chain
from assay.qualify.gate import file_sha256
from assay.qualify.index import index_path, index_text
from assay.qualify.receipt import SHA_FIELD, problems_in, receipt_filename, receipt_paths
from assay.qualify.render import GATE_DIR, gates_in, load_gate, record_path, render_text
from assay.qualify.sign import check_signature
from assay.qualify.stale import check_gate, mask

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
    """Problems for one gate's receipts, its ledger and its record, one line each naming
    the file."""
    problems: list[str] = []
    valid: list[tuple[Path, dict[str, Any]]] = []
    paths = receipt_paths(receipts_dir, gate)
    for path in paths[-1:] if armed(NEWEST_ONLY) else paths:
        receipt, found = _check_file(path, gate)
        problems.extend(found)
        if receipt is not None:
            valid.append((path, receipt))
    problems.extend(
        check_chain(
            Path(receipts_dir) / gate, {p.name: r for p, r in valid}, [p.name for p in paths]
        )
    )
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
        and mask(record.read_text("utf-8")) != render_text(gate, receipts)
    ):
        problems.append(f"{record}: record out of sync with its receipts (run `assay render`)")
    return problems


def _check_index(receipts_dir: Path, records_dir: Path, gates: set[str]) -> list[str]:
    index = index_path(records_dir)
    if not gates:
        return []
    if not index.is_file():
        return [f"{index}: index missing (run `assay render`)"]
    try:
        fresh = index_text(receipts_dir, records_dir)
    except AssayError:
        return []  # an invalid receipt is already reported against its own file
    if mask(index.read_text("utf-8")) != mask(fresh):
        return [f"{index}: index out of sync with the receipts (run `assay render`)"]
    return []


def verify_signatures(
    receipts_dir: Path, allowed_signers: Path | None
) -> tuple[list[str], list[str]]:
    """(problems, notes) for receipt signatures: a signature that does not hold, or any
    signature when no allowed-signers file exists, is a problem; each signer is a note."""
    problems: list[str] = []
    notes: list[str] = []
    for path in receipt_paths(receipts_dir):
        found = check_signature(path, allowed_signers)
        if found is None:
            continue
        if found.ok:
            notes.append(f"{path}: signed by {found.signer}: {found.detail}")
        else:
            who = f" (claims signer {found.signer})" if found.signer else ""
            problems.append(f"{path}: forged or broken signature{who}: {found.detail}")
    return problems, notes


def verify_stale(receipts_dir: Path, root: Path) -> tuple[list[str], list[str]]:
    """(failing, reported) stale-record lines: gates CI re-runs fail, the others are reported.

    AssayError when a receipt is invalid (run plain ``verify`` for the details)."""
    failing: list[str] = []
    reported: list[str] = []
    for gate in gates_in(receipts_dir):
        found = check_gate(root, load_gate(receipts_dir, gate))
        if found is not None:
            (failing if found.ci_runs else reported).append(found.describe())
    return failing, reported


def verify_all(receipts_dir: Path, records_dir: Path) -> list[str]:
    """Every problem found, one line each naming the file; an empty list means all is well.

    Checks each receipt (readable, schema-valid, verdicts consistent, sha256 matches its
    content, filed under its gate and named after its content, corrections resolvable,
    figures present and unchanged), each gate's hash-chained LEDGER (see
    :mod:`assay.qualify.chain`), each record and the index (present, equal to a fresh
    in-memory render of the valid receipts, stale banners masked; a record without receipts
    is reported too).
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
    problems.extend(_check_index(receipts_dir, records_dir, gates))
    if records_dir.is_dir():
        for md in sorted(records_dir.glob("*.md")):
            with md.open(encoding="utf-8") as handle:
                first = handle.readline()
            if first.startswith(RECORD_MARK) and md.stem not in gates:
                problems.append(f"{md}: record has no receipts in {receipts_dir}")
    return problems
