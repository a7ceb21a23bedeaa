"""Regression against a baseline: compare a gate's claims with its newest earlier receipt."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from assay.errors import AssayError
from assay.qualify.core.threshold import tolerance_base, tolerance_of, worse_than
from assay.qualify.ledger.receipt import read_receipt


def refuse_self_baseline(baseline_dir: Path, receipts_dir: Path) -> str | None:
    """Why ``baseline_dir`` cannot serve as baseline for a session writing ``receipts_dir``
    (None when it can): a baseline that is, holds or sits inside the receipts directory would
    read the receipts this session writes, so a regression run twice compares with itself."""
    base, out = Path(baseline_dir).resolve(), Path(receipts_dir).resolve()
    if base == out or base in out.parents or out in base.parents:
        return (
            f"--gate-baseline {baseline_dir}: it overlaps --gate-receipts {receipts_dir}, so the "
            "session would compare with its own receipts; write receipts elsewhere "
            "(--gate-receipts=DIR) or copy the baseline out first"
        )
    return None


def find_baseline(
    baseline_dir: Path, gate: str, device: str | None = None
) -> tuple[Path, dict[str, Any]] | None:
    """The newest complete valid receipt for ``gate`` in ``baseline_dir`` (ledger order), of
    ``device`` when given (a CPU run is never compared with a CUDA receipt imported from a GPU
    box, nor the other way round), or None when it has none.

    Looks in ``<dir>/<gate>/*.json`` (a receipts tree) and ``<dir>/*.json``. An invalid
    receipt there raises AssayError naming the file: a baseline is never silently skipped.
    """
    root = Path(baseline_dir)
    if not root.is_dir():
        raise AssayError(f"--gate-baseline {root}: not a directory")
    # a partial receipt is never the baseline
    from assay.qualify.judging.loading import ledger_order
    from assay.qualify.judging.standing import headline

    found = {}
    for path in sorted([*root.glob(f"{gate}/*.json"), *root.glob("*.json")]):
        receipt = read_receipt(path)
        if receipt["gate"] == gate and device in (None, receipt["run"]["device"]):
            found[path.name] = (path, receipt)
    if not found:
        return None
    # the ledger says which is newer; loose files without one go by (created, sha)
    order = ledger_order(root, gate, {name: r for name, (_, r) in found.items()})
    newest = headline([found[name][1] for name in order])
    return next((p, r) for p, r in found.values() if r is newest)


def compare(claims: list[dict[str, Any]], baseline: dict[str, Any], source: str) -> dict[str, Any]:
    """The receipt's ``baseline`` object: one comparison per baseline or current claim.

    A claim regresses when it passed in the baseline and does not pass now (or is gone), or
    when its value is worse than the baseline value by more than its declared tolerance.
    ``change`` and ``tolerance`` share one base (the tolerance mode's), so the record's two
    columns compare directly: both fractions of the baseline (``relative``), of
    max(|baseline|, |threshold|) (``threshold_scaled``), or both in the unit (``absolute``).
    """
    gate = baseline["gate"]
    now = {c["id"]: c for c in claims}
    before = {c["id"]: c for c in baseline["claims"]}
    comparisons: list[dict[str, Any]]
    regressions: list[str]
    comparisons, regressions = [], []
    for cid in [*before, *(c for c in now if c not in before)]:
        old, new = before.get(cid), now.get(cid)
        old_value = None if old is None else old["measurement"]["value"]
        value = None if new is None else new["measurement"]["value"]
        mode, tol = ("relative", None) if new is None else tolerance_of(new["threshold"])
        reasons = []
        lost = new is None or new["verdict"] != "pass"
        if old is not None and old["verdict"] == "pass" and lost:
            now_text = "absent" if new is None else new["verdict"]
            reasons.append(f"passed in the baseline, {now_text} now")
        change = None
        units = (
            (old["measurement"].get("unit", ""), new["measurement"].get("unit", ""))
            if old and new
            else None
        )
        if units is not None and units[0] != units[1] and value is not None:
            reasons.append(
                f"its unit changed from {units[0]!r} to {units[1]!r}: the values cannot be "
                "compared, so the change is not shown to be no worse"
            )
        elif new is not None and old_value is not None and value is not None:
            op, bound = new["threshold"]["op"], new["threshold"]["value"]
            base = tolerance_base(mode, old_value, bound)
            change = None if base == 0 else (value - old_value) / base
            # new is not None here, so tol is tolerance_of's number
            if worse_than(op, cast(float, tol), old_value, value, bound, mode):
                reasons.append(
                    f"{value:g} is worse than the baseline {old_value:g} by more than "
                    f"the {mode} tolerance {tol:g} ({op})"
                )
        entry = {
            "claim_id": cid,
            "baseline_verdict": None if old is None else old["verdict"],
            "verdict": None if new is None else new["verdict"],
            "baseline_value": old_value,
            "value": value,
            "change": change,
            "tolerance": tol,
            "regressed": bool(reasons),
        }
        if new is not None:
            entry["tolerance_mode"] = mode
        comparisons.append(entry)
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
