"""verify_all: tampered receipts and records out of sync are caught, naming the file."""

from __future__ import annotations

import json

import pytest
from gatekit import PASSING_GATE

from assay.errors import AssayError
from assay.qualify import render_all, verify_all


@pytest.fixture
def published(gates):
    gates.write("pub", PASSING_GATE.format(value="2e-4"))
    assert gates.run().ret == 0
    assert verify_all(gates.receipts, gates.records) == []
    return gates


def test_tampered_receipt_is_caught_naming_the_file(published):
    path = published.receipt_files("pub")[0]
    data = json.loads(path.read_text("utf-8"))
    data["claims"][0]["measurement"]["value"] = 1e-4  # still a consistent "pass"
    data["claims"][0]["margin"] = 9e-4
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    problems = verify_all(published.receipts, published.records)
    assert any(str(path) in p and "sha256 mismatch" in p for p in problems), problems
    with pytest.raises(AssayError, match=path.name):
        render_all(published.receipts, published.records)


def test_schema_invalid_receipt_is_caught_naming_the_file(published):
    path = published.receipt_files("pub")[0]
    data = json.loads(path.read_text("utf-8"))
    data["status"] = "great"
    path.write_text(json.dumps(data), encoding="utf-8")
    problems = verify_all(published.receipts, published.records)
    assert any(str(path) in p and "schema invalid" in p for p in problems), problems


def test_record_out_of_sync_is_caught_and_render_all_repairs_it(published):
    record = published.records / "pub.md"
    record.write_text(record.read_text("utf-8").replace("pass", "PASS!"), encoding="utf-8")
    problems = verify_all(published.receipts, published.records)
    assert problems == [
        f"{record}: record out of sync with its receipts or the working tree "
        "(hand-edited, or rendered before a change: run `assay render`)"
    ]
    assert render_all(published.receipts, published.records) == [record]
    assert verify_all(published.receipts, published.records) == []


def test_missing_record_and_orphan_record_are_caught(published):
    record = published.records / "pub.md"
    orphan = published.records / "ghost.md"
    orphan.write_text(record.read_text("utf-8"), encoding="utf-8")
    record.unlink()
    problems = verify_all(published.receipts, published.records)
    assert any(str(record) in p and "missing" in p for p in problems), problems
    assert any(str(orphan) in p and "no receipts" in p for p in problems), problems


def test_render_all_is_deterministic(published):
    record = published.records / "pub.md"
    first = record.read_bytes()
    render_all(published.receipts, published.records)
    assert record.read_bytes() == first
