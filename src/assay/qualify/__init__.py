"""assay.qualify: gates as a pytest plugin, schema-checked receipts and rendered records.

Five layers, each importing only those before it: ``core`` (thresholds, verdicts, hashing),
``ledger`` (receipts, the hash chain, history, corrections, signatures, archives), ``judging``
(standings, staleness, baselines), ``publishing`` (records, the index, the site, README spans,
verify, attestations) and ``plugin`` (the pytest plugin: gates, claims, sessions, the
environment, executed code). The names below are the public API and stay here whatever moves
inside. Knows nothing of training and never imports torch. Names load lazily (PEP 562), so importing
the package, or the pytest plugin inside it, costs no jinja2 or jsonschema import.
"""

from __future__ import annotations

from assay.lazy import lazy_attributes

_LAZY = {
    "Claim": "assay.qualify.plugin.gate",
    "Gate": "assay.qualify.plugin.gate",
    "Threshold": "assay.qualify.core.threshold",
    "Tolerance": "assay.qualify.core.threshold",
    "Timing": "assay.qualify.plugin.timing",
    "measure_time": "assay.qualify.plugin.timing",
    "SCHEMA_ID": "assay.qualify.ledger.receipt",
    "canonical_json": "assay.qualify.ledger.receipt",
    "read_receipt": "assay.qualify.ledger.receipt",
    "receipt_schema": "assay.qualify.ledger.receipt",
    "receipt_sha256": "assay.qualify.ledger.receipt",
    "write_receipt": "assay.qualify.ledger.chain",
    "headline": "assay.qualify.judging.standing",
    "render_all": "assay.qualify.publishing.index",
    "render_gate": "assay.qualify.publishing.render",
    "render_text": "assay.qualify.publishing.render",
    "verify_all": "assay.qualify.publishing.verify",
    "check_records": "assay.qualify.publishing.verify",
    "Standing": "assay.qualify.judging.standing",
    "gate_standing": "assay.qualify.judging.standing",
    "measure_control": "assay.qualify.plugin.timing",
    "report_at_exit": "assay.qualify.plugin.child_imports",
    "torch_stack": "assay.qualify.plugin.environment",
}

__all__ = sorted(_LAZY)


__getattr__ = lazy_attributes(__name__, _LAZY)
