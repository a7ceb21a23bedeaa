"""Receipts on disk: canonical hashing, schema validation, append-only atomic writes, loading."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import sys
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, cast

from assay.atomic import atomic_write_bytes, json_bytes
from assay.bounded import parse_json, read_text_bounded
from assay.errors import AssayError
from assay.qualify.core.identifier import id_problem
from assay.qualify.core.status import derive_status
from assay.qualify.core.threshold import judge

SCHEMA_ID = "assay.qualification-receipt/1"
SHA_FIELD = "receipt_sha256"


def canonical_json(obj: Any) -> bytes:
    """UTF-8 bytes of ``obj`` as sorted, compact JSON; raises ValueError on NaN or infinity."""
    text = json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8")


def receipt_sha256(receipt: dict[str, Any]) -> str:
    """sha256 hex of the canonical JSON of ``receipt`` without its ``receipt_sha256`` field."""
    body = {k: v for k, v in receipt.items() if k != SHA_FIELD}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def seal(receipt: dict[str, Any]) -> dict[str, Any]:
    """Return ``receipt`` with ``receipt_sha256`` set from its content."""
    sealed = {k: v for k, v in receipt.items() if k != SHA_FIELD}
    sealed[SHA_FIELD] = receipt_sha256(sealed)
    return sealed


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    """``node`` with every ``{"$ref": "#/$defs/x", ...}`` replaced by definition ``x`` (its
    sibling keys, annotations only, kept): the same constraints, checked without a reference
    lookup per instance node, which is most of the validator's time on a large receipt."""
    if isinstance(node, list):
        return [_inline_refs(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = _inline_refs(defs[ref.removeprefix("#/$defs/")], defs)
        return {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return {k: _inline_refs(v, defs) for k, v in node.items() if k != "$defs"}


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    text = resources.files("assay").joinpath("schemas/receipt.schema.json").read_text("utf-8")
    return cast("dict[str, Any]", parse_json(text))  # the packaged schema: a JSON object


@lru_cache(maxsize=1)
def _validator() -> Any:
    # imported here: reading a ledger (assay.qualify.ledger.chain) needs no schema validator
    from jsonschema import Draft202012Validator

    schema = _schema()
    Draft202012Validator.check_schema(schema)
    flat = _inline_refs(schema, schema.get("$defs", {}))
    return Draft202012Validator(flat, format_checker=Draft202012Validator.FORMAT_CHECKER)


def receipt_schema() -> dict[str, Any]:
    """The receipt JSON Schema (Draft 2020-12) shipped in the package."""
    return copy.deepcopy(_schema())


MAX_FLOAT_INT = int(sys.float_info.max)


def non_finite(value: Any, where: str) -> list[str]:
    """One line per number in ``value`` that no judgement can use: NaN, an infinity, or an
    integer too large for a float (every comparison of it would overflow)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{where}: {value!r} is not a finite number (JSON cannot carry it)"]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_FLOAT_INT:
        return [f"{where}: an integer too large for a float (no comparison can use it)"]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in non_finite(v, f"{where}.{k}")]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in non_finite(v, f"{where}[{i}]")]
    return []


def _consistency(receipt: dict[str, Any]) -> list[str]:
    problems = []
    ids = [c.get("id") for c in receipt.get("claims", [])]
    for dup in sorted({i for i in ids if ids.count(i) > 1}):
        problems.append(f"claims: id {dup!r} appears more than once")
    for i, cid in enumerate(ids):
        why = id_problem(cid) if isinstance(cid, str) else None
        if why is not None:
            problems.append(f"claims[{i}].id: {cid!r} {why}")
    headline = receipt.get("headline_claim")  # names a claim id: the same rule
    why = id_problem(headline) if isinstance(headline, str) else None
    if why is not None:
        problems.append(f"headline_claim: {headline!r} {why}")
    for i, claim in enumerate(receipt.get("claims", [])):
        judged = judge(claim)
        if judged["verdict"] != claim["verdict"]:
            problems.append(
                f"claims[{i}].verdict: {claim['verdict']!r} but the data give {judged['verdict']!r}"
            )
        flags = [c["failed"] for c in claim["controls"]]
        if [c["failed"] for c in judged["controls"]] != flags:
            problems.append(f"claims[{i}].controls: 'failed' flags disagree with the threshold")
    derived = derive_status(receipt)
    if receipt.get("status") != derived:
        problems.append(
            f"status: {receipt.get('status')!r} but its claims and tests give {derived!r} "
            "(a receipt's status is derived, never asserted)"
        )
    return problems


def problems_in(receipt: Any) -> list[str]:
    """Every reason ``receipt`` is not a valid receipt, as ``field: problem`` lines.

    Checks, in order: finite numbers, the JSON Schema (with formats), verdicts consistent
    with the thresholds, and ``receipt_sha256`` matching the content. Empty means valid.
    """
    problems = non_finite(receipt, "receipt")
    if problems:
        return problems
    errors = sorted(_validator().iter_errors(receipt), key=lambda e: list(e.absolute_path))
    for err in errors:
        where = "/".join(str(p) for p in err.absolute_path) or "(top)"
        problems.append(f"{where}: {err.message}")
    if problems:
        return problems
    problems.extend(_consistency(receipt))
    if receipt[SHA_FIELD] != receipt_sha256(receipt):
        problems.append(f"{SHA_FIELD}: does not match the content (tampered or edited)")
    return problems


def utc_now() -> str:
    """The current UTC time as ISO-8601 with a ``Z`` suffix, to the second."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def receipt_filename(receipt: dict[str, Any]) -> str:
    """``<UTC timestamp>-<first 12 hex of sha>.json`` for a sealed receipt."""
    stamp = receipt["created"].replace("-", "").replace(":", "").split(".")[0].rstrip("Z")
    return f"{stamp}Z-{receipt[SHA_FIELD][:12]}.json"


def write_atomic(path: Path, data: bytes, *, overwrite: bool) -> None:
    """:func:`assay.atomic.atomic_write_bytes`: ``data`` reaches ``path`` through a fsynced
    temporary file in the same folder. With ``overwrite=False`` an existing ``path`` is never
    replaced: AssayError instead (append-only without a race)."""
    try:
        atomic_write_bytes(path, data, replace=overwrite)
    except FileExistsError as err:
        if overwrite or not os.path.lexists(path):  # a file where a folder goes: not a receipt
            raise
        raise AssayError(f"{path}: already exists; receipts are never overwritten") from err


def dump_receipt(receipt: dict[str, Any]) -> bytes:
    """The on-disk form: sorted, indented UTF-8 JSON with a trailing newline
    (:func:`assay.atomic.json_bytes`)."""
    return json_bytes(receipt)


def read_receipt(path: Path) -> dict[str, Any]:
    """Parse one receipt file and return it if valid; AssayError naming the file otherwise."""
    try:
        data = parse_json(read_text_bounded(path, within=Path(path).parent))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise AssayError(f"{path}: not a readable JSON receipt ({err})") from err
    problems = problems_in(data)
    if problems:
        raise AssayError(f"{path}: invalid receipt: {problems[0]}")
    return cast("dict[str, Any]", data)  # problems_in found none: it is a receipt object


def receipt_paths(receipts_dir: Path, gate: str | None = None) -> list[Path]:
    """Receipt files under ``receipts_dir`` (one gate, or all), sorted by path."""
    root = Path(receipts_dir)
    pattern = f"{gate}/*.json" if gate else "*/*.json"
    return sorted(p for p in root.glob(pattern) if p.is_file() and not p.name.startswith("."))


def check_corrections(receipt: dict[str, Any], earlier: list[dict[str, Any]]) -> list[str]:
    """Problems with ``receipt['corrects']``: each must name an earlier receipt of the same
    gate (by sha256) that holds the corrected claim id."""
    by_sha = {r["receipt_sha256"]: r for r in earlier}
    problems = []
    for c in receipt["corrects"]:
        target = by_sha.get(c["receipt_sha256"])
        if target is None:
            problems.append(
                f"correction of {c['receipt_sha256'][:12]}: no such receipt for gate "
                f"{receipt['gate']!r}"
            )
        elif c["claim_id"] not in {claim["id"] for claim in target["claims"]}:
            problems.append(
                f"correction of {c['receipt_sha256'][:12]}: it has no claim {c['claim_id']!r}"
            )
    return problems
