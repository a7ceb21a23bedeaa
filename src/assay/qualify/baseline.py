"""Regression against a baseline: compare a gate's claims with its newest earlier receipt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.errors import AssayError
from assay.qualify.receipt import newest_first, read_receipt
from assay.qualify.threshold import worse_than


def find_baseline(baseline_dir: Path, gate: str) -> tuple[Path, dict[str, Any]] | None:
    """The newest valid receipt for ``gate`` in ``baseline_dir``, or None when it has none.

    Looks in ``<dir>/<gate>/*.json`` (a receipts tree) and ``<dir>/*.json``. An invalid
    receipt there raises AssayError naming the file: a baseline is never silently skipped.
    """
    root = Path(baseline_dir)
    if not root.is_dir():
        raise AssayError(f"--baseline {root}: not a directory")
    found = []
    for path in sorted([*root.glob(f"{gate}/*.json"), *root.glob("*.json")]):
        receipt = read_receipt(path)
        if receipt["gate"] == gate:
            found.append((path, receipt))
    if not found:
        return None
    newest = newest_first([r for _, r in found])[0]
    return next((p, r) for p, r in found if r is newest)


def _change(base: float, value: float) -> float | None:
    return None if base == 0 else (value - base) / abs(base)


def compare(claims: list[dict[str, Any]], baseline: dict[str, Any], source: str) -> dict[str, Any]:
    """The receipt's ``baseline`` object: one comparison per baseline or current claim.

    A claim regresses when it passed in the baseline and does not pass now (or is gone), or
    when its value is worse than the baseline value by more than its own declared relative
    tolerance (direction from the operator; equality thresholds compare exactly).
    """
    gate = baseline["gate"]
    now = {c["id"]: c for c in claims}
    before = {c["id"]: c for c in baseline["claims"]}
    comparisons, regressions = [], []
    for cid in [*before, *(c for c in now if c not in before)]:
        old, new = before.get(cid), now.get(cid)
        old_value = None if old is None else old["measurement"]["value"]
        value = None if new is None else new["measurement"]["value"]
        tolerance = None if new is None else new["threshold"]["tolerance"]
        reasons = []
        lost = new is None or new["verdict"] != "pass"
        if old is not None and old["verdict"] == "pass" and lost:
            now_text = "absent" if new is None else new["verdict"]
            reasons.append(f"passed in the baseline, {now_text} now")
        if new is not None and old_value is not None and value is not None:
            op = new["threshold"]["op"]
            tol, bound = new["threshold"]["tolerance"], new["threshold"]["value"]
            if worse_than(op, tol, old_value, value, bound):
                reasons.append(
                    f"{value:g} is worse than the baseline {old_value:g} by more than "
                    f"the tolerance {new['threshold']['tolerance']:g} ({op})"
                )
        comparisons.append(
            {
                "claim_id": cid,
                "baseline_verdict": None if old is None else old["verdict"],
                "verdict": None if new is None else new["verdict"],
                "baseline_value": old_value,
                "value": value,
                "change": None if None in (old_value, value) else _change(old_value, value),
                "tolerance": tolerance,
                "regressed": bool(reasons),
            }
        )
        regressions.extend(f"gate {gate!r} claim {cid!r} regressed: {r}" for r in reasons)
    return {
        "source": source,
        "receipt_sha256": baseline["receipt_sha256"],
        "created": baseline["created"],
        "comparisons": comparisons,
        "regressions": regressions,
    }


def no_baseline(source: str) -> dict[str, Any]:
    """The ``baseline`` object when the baseline directory holds no receipt for the gate."""
    return {
        "source": source,
        "receipt_sha256": None,
        "created": None,
        "comparisons": [],
        "regressions": [],
    }
