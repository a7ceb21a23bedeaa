"""The hash-chained ledger: deletions, reorders, insertions and re-sealed receipts are reported,
legacy receipts are migrated without being rewritten, and new receipts chain onto them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gates"))

from assay.qualify.ledger.chain import (  # noqa: E402
    BACK_LINK,
    ensure_ledger,
    ledger_path,
    read_ledger,
    write_receipt,
)
from assay.qualify.ledger.receipt import dump_receipt, receipt_filename, seal  # noqa: E402
from assay.qualify.publishing.verify import verify_all  # noqa: E402
from support.faults import tamper_cases  # noqa: E402


def test_honest_ledger_verifies_and_each_receipt_links_the_one_before(tmp_path):
    ledger = tamper_cases.Ledger(tmp_path)
    assert ledger.problems() == []
    receipts = [ledger.load(i) for i in range(3)]
    assert receipts[0][BACK_LINK] is None
    assert receipts[1][BACK_LINK] == receipts[0]["receipt_sha256"]
    assert receipts[2][BACK_LINK] == receipts[1]["receipt_sha256"]
    assert [sha for sha, _ in ledger.entries()] == [r["receipt_sha256"] for r in receipts]


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("re-seal", ["entry 3", "re-sealed"]),
        ("delete", ["entry 2", "deleted"]),
        ("reorder", ["reordered"]),
        ("insert", ["entry 3", "inserted"]),
    ],
)
def test_tampered_ledger_is_reported_after_a_rerender(tmp_path, case, words):
    problems = tamper_cases.detected(tmp_path, case)
    assert any(all(w in p for w in words) for p in problems), problems


def test_unlisted_file_and_missing_file_are_reported(tmp_path):
    ledger = tamper_cases.Ledger(tmp_path)
    extra = tamper_cases.synthetic_receipt("2026-01-05T00:00:00Z", 0.0, "0" * 64)
    extra = seal(extra)
    stray = ledger.receipts / "demo" / receipt_filename(extra)
    stray.write_bytes(dump_receipt(extra))
    ledger.paths[0].unlink()
    ledger.rerender()
    problems = ledger.problems()
    assert any(str(stray) in p and "inserted" in p and "not in the ledger" in p for p in problems)
    assert any("entry 1" in p and "deleted" in p for p in problems), problems


def test_a_receipt_without_back_link_after_chained_ones_is_an_insertion(tmp_path):
    ledger = tamper_cases.Ledger(tmp_path)
    legacy = seal(tamper_cases.synthetic_receipt("2026-01-09T00:00:00Z", 0.0, "0" * 64))
    path = ledger.receipts / "demo" / receipt_filename(legacy)
    path.write_bytes(dump_receipt(legacy))
    ledger.write_entries([*ledger.entries(), (legacy["receipt_sha256"], path.name)])
    ledger.rerender()
    assert any("without a back-link after chained" in p for p in ledger.problems())


def test_legacy_receipts_are_listed_by_time_unchanged_and_new_receipts_chain_onto_them(
    tmp_path,
):
    receipts = tmp_path / "receipts"
    written = []
    for day, value in (("03", 2e-4), ("01", 0.0), ("02", 1e-4)):
        r = seal(tamper_cases.synthetic_receipt(f"2026-01-{day}T00:00:00Z", value, "0" * 64))
        path = receipts / "demo" / receipt_filename(r)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(dump_receipt(r))
        written.append((path, path.read_bytes(), r))
    assert ensure_ledger(receipts, "demo")
    entries, problems = read_ledger(ledger_path(receipts, "demo"))
    assert problems == []
    by_time = sorted(written, key=lambda w: w[2]["created"])
    assert [sha for sha, _ in entries] == [w[2]["receipt_sha256"] for w in by_time]
    assert all(path.read_bytes() == data for path, data, _ in written)  # never rewritten
    new = write_receipt(
        tamper_cases.synthetic_receipt("2026-01-04T00:00:00Z", 0.0, "0" * 64), receipts
    )
    assert json.loads(new.read_text("utf-8"))[BACK_LINK] == by_time[-1][2]["receipt_sha256"]
    assert read_ledger(ledger_path(receipts, "demo"))[0][-1][1] == new.name


def test_published_receipts_verify_with_their_ledgers():
    records = ROOT / "records"
    assert verify_all(records / "receipts", records) == []
    for gate_dir in sorted((records / "receipts").iterdir()):
        entries, problems = read_ledger(gate_dir / "LEDGER")
        assert problems == [] and len(entries) == len(list(gate_dir.glob("*.json")))


def _write_one(args: tuple[str, int]) -> None:
    folder, i = args
    receipt = tamper_cases.synthetic_receipt(f"2026-01-01T00:00:{i:02d}Z", 0.0, "0" * 64)
    write_receipt(receipt, Path(folder))


def test_sessions_writing_one_gate_at_once_keep_one_unbroken_chain(tmp_path):
    import multiprocessing

    receipts = tmp_path / "receipts"
    with multiprocessing.get_context("fork").Pool(4) as pool:
        pool.map(_write_one, [(str(receipts), i) for i in range(12)])
    entries, problems = read_ledger(ledger_path(receipts, "demo"))
    assert problems == [] and len(entries) == 12
    from assay.qualify.publishing.index import render_all

    render_all(receipts, tmp_path)
    assert verify_all(receipts, tmp_path) == []
