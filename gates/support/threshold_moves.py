"""Thresholds that moved: each a dated correction citing the receipt that failed under the old
threshold, written once into the ledger that holds that receipt."""

from __future__ import annotations

from assay.qualify.judging.loading import load_checked
from assay.qualify.plugin.session import setting_dir


def correct_moved_thresholds(gate, moves, config) -> str:
    """Write each moved threshold's dated correction once: ``moves`` holds (sha256 of the
    receipt that failed under the old threshold, {claim id: the move in words}, a reason with a
    ``{move}`` field). Only a ledger this pytest session writes that holds the failing receipt,
    and no correction of that claim citing it yet, gets one (a correction must name a receipt of
    its own ledger); a line saying how many were written."""
    receipts = setting_dir(config, "gate_receipts")
    ledger = receipts / gate.name / "LEDGER" if receipts is not None else None
    text = ledger.read_text("utf-8") if ledger is not None and ledger.exists() else ""
    written = 0
    for failing, moved, reason in moves:
        if failing not in text:
            continue
        done = {
            c["claim_id"]
            for r in load_checked(receipts, gate.name)[0]
            for c in r["corrects"]
            if c["receipt_sha256"] == failing
        }
        for claim_id, move in moved.items():
            if claim_id not in done:
                gate.correct(failing, claim_id, reason.format(move=move))
                written += 1
    return f"threshold moves: {written} dated corrections written in this run"
