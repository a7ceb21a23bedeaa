"""A correction receipt: the original row stays, the dated correction stands beside it."""

from __future__ import annotations

from gatekit import PASSING_GATE

from assay.qualify import verify_all

CORRECTING = """
def test_diff(gate):
    gate.correct({sha!r}, "diff", "the first run compared against the wrong reference")
    claim = gate.claim("diff", "outputs agree", kind="correctness",
                       threshold=Threshold("<=", 1e-3, tolerance=0.1), unit="max abs")
    claim.measure(0.0004)
    claim.control("broken subject", 0.5)
"""


def test_correction_renders_original_row_and_dated_correction(gates):
    gates.write("fix", PASSING_GATE.format(value="1.5e-05"))
    assert gates.run().ret == 0
    original = gates.only_receipt("fix")
    original_bytes = gates.receipt_files("fix")[0].read_bytes()
    gates.write("fix", CORRECTING.format(sha=original["receipt_sha256"]))
    result = gates.run()
    assert result.ret == 0, result.stdout.str()
    # Both receipts may share a timestamp second, so find the original by its sha, not order.
    (kept,) = [p for p in gates.receipt_files("fix") if original["receipt_sha256"][:12] in p.name]
    assert kept.read_bytes() == original_bytes  # never rewritten
    record = (gates.records / "fix.md").read_text("utf-8")
    section = record.split("## Corrections", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in section.splitlines() if original["receipt_sha256"][:12] in line)
    assert "1.5e-05 max abs" in row  # the original measurement, kept
    assert "the first run compared against the wrong reference" in row
    assert "Now: 0.0004 max abs, pass" in row
    assert original["created"][:10] in row
    assert verify_all(gates.receipts, gates.records) == []


def test_correction_of_an_unknown_receipt_is_not_written(gates):
    gates.write("fix", CORRECTING.format(sha="0" * 64))
    result = gates.run()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*gate 'fix'*correction of 000000000000: no such receipt*"])
    assert gates.receipt_files("fix") == []
