"""A gate's ledger as the standing reads it: every receipt checked (schema, seal, filing, chain,
corrections, figures), in LEDGER order, and the receipts erased under an acknowledged
correction, read back from the text the acknowledgement keeps."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.bounded import parse_json, read_text_refusing
from assay.qualify.core.source import file_sha256
from assay.qualify.ledger.chain import check_chain, ledger_path, read_ledger
from assay.qualify.ledger.corrections import CORRECTIONS, Correction, read_corrections
from assay.qualify.ledger.receipt import (
    SHA_FIELD,
    check_corrections,
    problems_in,
    receipt_filename,
    receipt_paths,
)


def _check_file(path: Path, gate: str) -> tuple[dict[str, Any] | None, list[str]]:
    try:
        data = parse_json(read_text_refusing(path, within=path.parent))
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


def ledger_order(receipts_dir: Path, gate: str, found: dict[str, dict[str, Any]]) -> list[str]:
    """File names of ``found`` (file name -> receipt) oldest first: LEDGER order, then any
    file the ledger does not list by (created, sha) (a problem reported elsewhere)."""
    path = ledger_path(receipts_dir, gate)
    listed = [name for _, name in read_ledger(path)[0]] if path.exists() else []
    ordered = [n for n in dict.fromkeys(listed) if n in found]
    rest = sorted(
        (n for n in found if n not in ordered),
        key=lambda n: (found[n]["created"], found[n][SHA_FIELD]),
    )
    return ordered + rest


def load_checked(
    receipts_dir: Path,
    gate: str,
    records_dir: Path | None = None,
    erased: list[dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Valid receipts of ``gate`` in ledger order and every problem found on the way:
    unreadable, invalid or misfiled receipts, the hash chain, corrections (which may cite an
    earlier receipt or one in ``erased``), figures (when ``records_dir`` is given). One line
    per problem, naming the file."""
    problems: list[str] = []
    valid: dict[str, dict[str, Any]] = {}
    paths = receipt_paths(receipts_dir, gate)
    for path in paths:
        receipt, found = _check_file(path, gate)
        problems.extend(found)
        if receipt is not None:
            valid[path.name] = receipt
    problems.extend(check_chain(Path(receipts_dir) / gate, valid, [p.name for p in paths]))
    ordered = [valid[n] for n in ledger_order(receipts_dir, gate, valid)]
    for i, receipt in enumerate(ordered):
        path = Path(receipts_dir) / gate / receipt_filename(receipt)
        cited = [*ordered[:i], *(erased or [])]
        problems.extend(f"{path}: {p}" for p in check_corrections(receipt, cited))
        if records_dir is not None:
            problems.extend(_check_figures(path, receipt, Path(records_dir)))
    return ordered, problems


@dataclass
class Ledger:
    """One gate's ledger as read: valid receipts in order, the acknowledged corrections, the
    receipts they erased, and every problem found."""

    receipts: list[dict[str, Any]]
    acknowledged: list[Correction]
    erased: list[tuple[dict[str, Any], Correction]]
    problems: list[str]


def load_ledger(receipts_dir: Path, gate: str, records_dir: Path | None = None) -> Ledger:
    """Read and check one gate's ledger (:func:`load_checked`, :func:`acknowledged`)."""
    entries, erased, problems = acknowledged(receipts_dir, gate)
    receipts, found = load_checked(receipts_dir, gate, records_dir, [r for r, _ in erased])
    return Ledger(receipts, entries, erased, [*found, *problems])


def acknowledged(
    receipts_dir: Path, gate: str
) -> tuple[list[Correction], list[tuple[dict[str, Any], Correction]], list[str]]:
    """The gate's ``CORRECTIONS`` entries, the receipts they erased (read back from each
    entry's ``content``) and one problem per line that is not a valid entry or whose content
    is not a valid receipt of the gate."""
    entries, problems = read_corrections(receipts_dir, gate)
    erased = []
    for entry in entries:
        if not entry.erases_receipt or entry.content is None:
            continue
        where = f"{gate}/{CORRECTIONS}:{entry.line}"
        try:
            receipt = parse_json(entry.content)
        except json.JSONDecodeError as err:
            problems.append(f"{where}: content is not JSON ({err})")
            continue
        found = problems_in(receipt)
        if found:
            problems.append(f"{where}: content is not a valid receipt: {found[0]}")
        elif receipt["gate"] != gate:
            problems.append(f"{where}: content is a receipt of gate {receipt['gate']!r}")
        else:
            erased.append((receipt, entry))
    return entries, erased, problems
