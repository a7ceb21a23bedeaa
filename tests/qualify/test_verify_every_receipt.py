"""verify checks every receipt of a gate, not only the newest, and re-judges each control's flag."""

from __future__ import annotations

import json

from gatekit import PASSING_GATE

from assay.qualify.ledger.receipt import problems_in, seal
from assay.qualify.publishing.verify import verify_all


def test_an_older_tampered_receipt_and_a_forged_control_flag_are_caught(gates):
    gates.write("pub", PASSING_GATE.format(value="2e-4"))
    assert gates.run().ret == 0
    assert gates.run().ret == 0  # a second receipt: the first is no longer the newest
    oldest, newest = gates.receipt_files("pub")[:2]
    assert oldest != newest  # LEDGER order (names written in one second sort by hash)
    data = json.loads(oldest.read_text("utf-8"))
    data["claims"][0]["measurement"]["value"] = 1e-4  # still a consistent "pass"
    data["claims"][0]["margin"] = 9e-4
    oldest.write_text(json.dumps(data, indent=2), encoding="utf-8")
    problems = verify_all(gates.receipts, gates.records)
    assert any(str(oldest) in p and "sha256 mismatch" in p for p in problems), problems
    forged = json.loads(newest.read_text("utf-8"))
    forged["claims"][0]["controls"][0]["failed"] = False  # resealed: only re-judging sees it
    assert any("'failed' flags disagree" in p for p in problems_in(seal(forged)))
