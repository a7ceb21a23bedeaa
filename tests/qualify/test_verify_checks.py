"""verify's smaller checks, each shown to fire on the defect it names: figures, folder names,
links out of the records and receipts folders, signature and history notes, stale reporting,
and the refusals of a bad threshold. (conftest keeps the user's trusted signers out.)"""

from __future__ import annotations

import pytest
from gatekit import TINY_PNG

import assay.qualify.publishing.verify as verify_module
from assay.errors import AssayError
from assay.qualify import Threshold, Tolerance, verify_all
from assay.qualify.ledger.receipt import read_receipt
from assay.qualify.publishing.verify import check_records

FIGURE_GATE = """
def test_plotted(gate):
    gate.figure({png!r}, "error by layer")
    c = gate.claim("c", "ok", kind="memory", threshold=Threshold("<=", 10), unit="MiB")
    c.measure(4)
    c.control("leak injected", 40)
"""


def test_a_deleted_figure_is_a_problem_naming_it(gates, tmp_path):
    png = tmp_path / "plot.png"
    png.write_bytes(TINY_PNG)
    gates.write("plotted", FIGURE_GATE.format(png=str(png)))
    assert gates.run().ret == 0
    figure = next((gates.records / "figures" / "plotted").glob("*.png"))
    figure.unlink()
    problems = verify_all(gates.receipts, gates.records)
    assert any("is missing from" in p and figure.name in p for p in problems), problems


def test_a_folder_that_is_no_gate_name_is_a_problem(published):
    odd = published.receipts / "Not A Gate"
    odd.mkdir()
    assert f"{odd}: not a gate folder name" in verify_all(published.receipts, published.records)


def test_a_record_linked_out_of_the_records_folder_is_not_read(published, tmp_path):
    record = published.records / "pub.md"
    outside = tmp_path / "elsewhere.md"
    outside.write_bytes(record.read_bytes())  # the very same text
    record.unlink()
    record.symlink_to(outside)
    problems = verify_all(published.receipts, published.records)
    assert any(str(record) in p and "not readable" in p for p in problems), problems


def test_a_receipt_linked_out_of_its_folder_is_not_read(published, tmp_path):
    receipt = published.receipt_files("pub")[0]
    outside = tmp_path / receipt.name
    outside.write_bytes(receipt.read_bytes())
    receipt.unlink()
    receipt.symlink_to(outside)
    with pytest.raises(AssayError, match="outside") as refused:  # bad input: one line, exit 2
        verify_all(published.receipts, published.records)
    assert str(refused.value).startswith(f"{receipt}: links to")
    with pytest.raises(AssayError, match="outside"):
        read_receipt(receipt)


def test_an_untracked_tree_says_its_history_was_not_checked(published):
    notes = check_records(published.receipts, published.records).notes
    assert sum(n.startswith("history not checked: ") for n in notes) == 1, notes  # said once


def test_signatures_that_cannot_be_checked_are_a_problem_not_a_crash(published, monkeypatch):
    def no_tool(*args, **kwargs):
        raise AssayError("ssh-keygen not found: install OpenSSH (openssh-client) to sign")

    monkeypatch.setattr(verify_module, "verify_signatures", no_tool)
    report = check_records(published.receipts, published.records)
    assert report.problems == ["ssh-keygen not found: install OpenSSH (openssh-client) to sign"]


def test_requiring_signatures_without_outside_signers_is_refused(published):
    problems = check_records(published.receipts, published.records, require_signatures=True)
    refusal = [p for p in problems.problems if p.startswith("--require-signatures refused")]
    assert refusal and "no trusted signers outside the tree" in refusal[0], problems.problems


def test_unsigned_receipts_are_not_counted_when_nothing_is_signed(published):
    notes = check_records(published.receipts, published.records).notes
    assert not any("receipts unsigned" in n for n in notes), notes


def test_stale_records_are_looked_for_only_when_asked(published):
    gate_module = published.modules[0]
    gate_module.write_text(gate_module.read_text() + "\n# changed after the run\n")
    quiet = check_records(published.receipts, published.records)
    asked = check_records(published.receipts, published.records, stale=True)
    extra = set(asked.problems + asked.notes) - set(quiet.problems + quiet.notes)
    assert extra and all("stale" in line for line in extra), extra


def test_bad_thresholds_are_refused_naming_the_field_and_the_choices():
    with pytest.raises(AssayError, match=r"Threshold\.op: expected one of < <= == >= >, got '~'"):
        Threshold("~", 1.0)
    with pytest.raises(AssayError, match=r"^Tolerance\.value: expected >= 0, got -1"):
        Tolerance.relative(-1)


def test_an_unreadable_markdown_entry_does_not_stop_the_orphan_check(published):
    blocker = published.records / "a-folder.md"
    blocker.mkdir()  # globbed as *.md, opening it fails
    orphan = published.records / "zz-ghost.md"
    orphan.write_text((published.records / "pub.md").read_text("utf-8"), encoding="utf-8")
    problems = verify_all(published.receipts, published.records)
    assert any(str(blocker) in p and "not readable" in p for p in problems), problems
    assert any(str(orphan) in p and "record has no receipts" in p for p in problems), problems
