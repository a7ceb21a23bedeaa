"""Defects in assay.qualify: the verdict, the ledger, staleness and signatures."""

from __future__ import annotations

from assay_testing.defects import Defect
from assay_testing.patching import Edit

DEFECTS: tuple[Defect, ...] = (
    Defect(
        "qualify.publishing.compare.flip_unseen",
        "compare never reports a claim as flipped to fail (it shows as regressed at most)",
        (
            Edit(
                "assay.qualify.publishing.compare:claim_change",
                'if before["verdict"] == "pass" and (after["verdict"] != "pass" '
                "or fails_old_bound):",
                "if False:",
            ),
        ),
    ),
    Defect(
        "qualify.ledger.chain.unchained",
        "verify ignores the LEDGER and the receipts' back-links",
        (
            Edit(
                "assay.qualify.ledger.chain:check_chain",
                "    path = Path(gate_dir) / LEDGER\n",
                "    return []\n    path = Path(gate_dir) / LEDGER\n",
            ),
        ),
    ),
    Defect(
        "qualify.core.threshold.controls_ignored",
        "a claim passes on its measurement alone, whatever its controls",
        (
            Edit(
                "assay.qualify.core.threshold:judge",
                'verdict = "pass" if conclusive else "inconclusive"',
                'verdict = "pass"',
            ),
        ),
    ),
    Defect(
        "qualify.ledger.receipt.hash_skips_claims",
        "receipt_sha256 does not cover the claims",
        (
            Edit(
                "assay.qualify.ledger.receipt:receipt_sha256",
                "if k != SHA_FIELD}",
                'if k not in (SHA_FIELD, "claims")}',
            ),
        ),
    ),
    Defect(
        "qualify.ledger.receipt.controls_not_judged",
        "validation does not re-judge the controls' failed flags",
        (
            Edit(
                "assay.qualify.ledger.receipt:_consistency",
                'if [c["failed"] for c in judged["controls"]] != flags:',
                "if False:",
            ),
        ),
    ),
    Defect(
        "qualify.ledger.sign.accept_any",
        "a signature is reported good without being checked",
        (
            Edit(
                "assay.qualify.ledger.sign:signature_state",
                "    if trusted is None or not Path(trusted).is_file():\n",
                '    return Signature(path, "unchecked", "signed", "good signature")\n'
                "    if trusted is None or not Path(trusted).is_file():\n",
            ),
        ),
    ),
    Defect(
        "qualify.judging.stale.ignore",
        "staleness is never reported: every record counts as current",
        (
            Edit(
                "assay.qualify.judging.stale:check_receipt",
                '    gate = receipt["gate"]\n',
                "    return None\n",
            ),
        ),
    ),
    Defect(
        "qualify.publishing.verify.newest_receipt_only",
        "verify checks only the newest receipt of a gate",
        (
            Edit(
                "assay.qualify.publishing.verify:verify_tree",
                "        problems.extend(standing.problems)\n",
                "        heads = [r['receipt_sha256'][:12] for r in standing.receipts[-1:]]\n"
                "        problems.extend(p for p in standing.problems if all(h in p for h in heads))\n",  # noqa: E501
            ),
        ),
    ),
    Defect(
        "qualify.publishing.verify.record_not_compared",
        "verify does not compare a record with a fresh render",
        (
            Edit(
                "assay.qualify.publishing.verify:record_problems",
                "    if standing.receipts and text",
                "    if False and text",
            ),
        ),
    ),
)
