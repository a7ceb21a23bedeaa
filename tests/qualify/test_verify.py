"""verify_all: tampered receipts and records out of sync are caught, naming the file."""

from __future__ import annotations

import json

import pytest

from assay.errors import AssayError
from assay.qualify import render_all, verify_all
from assay.qualify.publishing.verify import check_records


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


def test_check_records_reports_a_clean_tree_and_names_what_breaks_it(published):
    report = check_records(published.receipts, published.records)
    assert report.problems == []
    as_json = report.as_json()
    assert as_json["ok"] is True and as_json["problems"] == []
    assert as_json["standings"] == {
        "pub": {"status": "pass", "summary": report.standings[0].summary()}
    }
    index = published.records / "README.md"
    index.write_text(index.read_text("utf-8") + "forged line\n", encoding="utf-8")
    report = check_records(published.receipts, published.records)
    assert report.problems == [
        f"{index}: index out of sync with the receipts or the working tree "
        "(hand-edited, or rendered before a change: run `assay render`)"
    ]
    assert report.as_json()["ok"] is False


def test_a_stray_markdown_file_in_latin_1_is_reported_not_a_crash(published):
    (published.records / "notes.md").write_bytes("caf\xe9\n".encode("latin-1"))
    problems = check_records(published.receipts, published.records).problems
    assert len(problems) == 1 and problems[0].startswith(f"{published.records / 'notes.md'}: stray")


def test_stray_markdown_that_no_receipt_produces_is_reported(published):
    """Any Markdown under the records but the index and the gates' records: a reader takes
    it for published evidence."""
    (published.records / "figures" / "pub").mkdir(parents=True)
    stray = [published.records / "summary.md", published.records / "figures" / "pub" / "x.md"]
    for path in stray:
        path.write_text("# All gates pass\n", "utf-8")
    problems = check_records(published.receipts, published.records).problems
    assert [p.split(": ")[0] for p in problems] == [str(p) for p in sorted(stray)], problems
    assert all("stray Markdown" in p for p in problems)


def test_a_ledger_linked_out_of_its_folder_is_refused_not_read(published):
    ledger = published.receipts / "pub" / "LEDGER"
    ledger.unlink()
    ledger.symlink_to("/dev/zero")
    with pytest.raises(AssayError, match="outside") as refused:  # bad input: one line, exit 2
        check_records(published.receipts, published.records)
    assert str(refused.value).startswith(f"{ledger}: links to")
