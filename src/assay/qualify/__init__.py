"""assay.qualify: gates as a pytest plugin, schema-checked receipts and rendered records.

Knows nothing of training and never imports torch. Names load lazily (PEP 562), so importing
the package, or the pytest plugin inside it, costs no jinja2 or jsonschema import.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Claim": "assay.qualify.gate",
    "Gate": "assay.qualify.gate",
    "Threshold": "assay.qualify.threshold",
    "Tolerance": "assay.qualify.threshold",
    "Timing": "assay.qualify.timing",
    "measure_time": "assay.qualify.timing",
    "SCHEMA_ID": "assay.qualify.receipt",
    "canonical_json": "assay.qualify.receipt",
    "read_receipt": "assay.qualify.receipt",
    "receipt_schema": "assay.qualify.receipt",
    "receipt_sha256": "assay.qualify.receipt",
    "write_receipt": "assay.qualify.chain",
    "headline": "assay.qualify.assemble",
    "render_all": "assay.qualify.index",
    "render_gate": "assay.qualify.render",
    "render_text": "assay.qualify.render",
    "verify_all": "assay.qualify.verify",
    "check_records": "assay.qualify.verify",
    "Standing": "assay.qualify.standing",
    "gate_standing": "assay.qualify.standing",
    "measure_control": "assay.qualify.timing",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'assay.qualify' has no attribute {name!r}")
