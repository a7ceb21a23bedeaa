"""assay.qualify: gates as a pytest plugin, schema-checked receipts and rendered records.

Knows nothing of training; torch is imported only lazily to describe the environment.
"""

from assay.qualify.gate import Claim, Gate
from assay.qualify.receipt import (
    SCHEMA_ID,
    canonical_json,
    read_receipt,
    receipt_schema,
    receipt_sha256,
    write_receipt,
)
from assay.qualify.render import render_all, render_gate, render_text
from assay.qualify.threshold import Threshold
from assay.qualify.verify import verify_all

__all__ = [
    "SCHEMA_ID",
    "Claim",
    "Gate",
    "Threshold",
    "canonical_json",
    "read_receipt",
    "receipt_schema",
    "receipt_sha256",
    "render_all",
    "render_gate",
    "render_text",
    "verify_all",
    "write_receipt",
]
