"""A gate split retires the moved claims only in a ledger that held them and does not yet
retire them: a fresh receipts folder (CI's regression run, stop 35's failure) or a ledger that
already retires them gets no correction, so no receipt names a receipt its own ledger lacks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

GATES = Path(__file__).resolve().parents[2] / "gates"
sys.path.insert(0, str(GATES))

from support.moved_claims import to_retire  # noqa: E402

CLAIM = """
def test_{name}(gate):
    c = gate.claim("{name}", "agrees", kind="correctness", threshold=Threshold("<=", 1e-3))
    c.measure(0.0)
    c.control("broken", 1.0)
"""

RETIRE = """
import sys
sys.path.insert(0, {gates!r})
from support.moved_claims import retire_moved_claims


def test_retire(gate, pytestconfig):
    from pathlib import Path
    gate.note(retire_moved_claims(gate, "new", ("moves",), pytestconfig, Path({published!r})))
"""


def split(gates) -> str:
    """Gate ``old`` held ``stays`` and ``moves``; ``moves`` now lives in gate ``new`` and
    ``old`` retires it. The sha256 of the receipt of ``old`` that held it."""
    gates.write("old", CLAIM.format(name="stays") + CLAIM.format(name="moves"))
    gates.write("new", CLAIM.format(name="moves"))
    assert gates.run().ret == 0
    held = gates.only_receipt("old")["receipt_sha256"]
    retire = RETIRE.format(gates=str(GATES), published=str(gates.receipts))
    gates.write("old", CLAIM.format(name="stays") + retire)
    return held


def corrections(gates, receipts: Path) -> list[list[dict]]:
    return [json.loads(f.read_text())["corrects"] for f in gates.receipt_files("old", receipts)]


def test_the_ledger_that_held_the_claim_retires_it_once(gates):
    held = split(gates)
    assert to_retire(gates.receipts, "old", ("moves", "never")) == [("moves", held)]
    assert gates.run().ret == 0
    assert to_retire(gates.receipts, "old", ("moves",)) == []
    assert gates.run().ret == 0  # already retired: no second correction
    counts = [len(c) for c in corrections(gates, gates.receipts)]
    assert counts == [0, 1, 0], counts
    assert corrections(gates, gates.receipts)[1][0]["receipt_sha256"] == held


def test_a_fresh_receipts_folder_gets_no_correction(gates):
    split(gates)
    fresh = gates.pytester.path / "fresh"
    assert to_retire(fresh, "old", ("moves",)) == []
    result = gates.run(f"--gate-baseline={gates.receipts}", receipts=fresh)
    # the moved claim regresses against the baseline (it left this gate) but no receipt is
    # refused for naming a receipt its ledger lacks
    assert "no such receipt" not in result.stdout.str()
    assert corrections(gates, fresh) == [[]]


REPLACE = """
import sys
sys.path.insert(0, {gates!r})
from support.moved_claims import retire_replaced_claims


def test_retire(gate, pytestconfig):
    gate.note(retire_replaced_claims(gate, ("moves",), "replaced by stays", pytestconfig))
"""


def test_a_replaced_claim_is_retired_once_with_its_reason(gates):
    held = split(gates)
    gates.write("old", CLAIM.format(name="stays") + REPLACE.format(gates=str(GATES)))
    assert gates.run().ret == 0
    assert gates.run().ret == 0  # already retired: no second correction
    found = corrections(gates, gates.receipts)
    assert [len(c) for c in found] == [0, 1, 0], found
    assert found[1][0] == {
        "receipt_sha256": held,
        "claim_id": "moves",
        "reason": "replaced by stays",
    }


MOVED = """
import sys
sys.path.insert(0, {gates!r})
from support.threshold_moves import correct_moved_thresholds

MOVES = (({failing!r}, {{"agrees": "<= 1e-3 -> <= 1e-1"}}, "2026-12-07: bound {{move}}"),)


def test_agrees(gate, pytestconfig):
    c = gate.claim("agrees", "agrees", kind="correctness", threshold=Threshold("<=", 1e-1))
    c.measure(0.01)
    c.control("broken", 1.0)
    gate.note(correct_moved_thresholds(gate, MOVES, pytestconfig))
"""


def test_a_moved_threshold_is_corrected_once_citing_the_failing_receipt(gates):
    """The ledger that holds the receipt that failed under the old threshold gets the dated
    correction once; a fresh receipts folder, which never held that receipt, gets none."""
    failing_claim = CLAIM.format(name="agrees").replace("c.measure(0.0)", "c.measure(0.01)")
    gates.write("old", failing_claim)
    assert gates.run().ret != 0  # 0.01 fails <= 1e-3
    failing = gates.only_receipt("old")["receipt_sha256"]
    gates.write("old", MOVED.format(gates=str(GATES), failing=failing))
    assert gates.run().ret == 0
    assert gates.run().ret == 0  # already corrected: no second correction
    found = corrections(gates, gates.receipts)
    assert [len(c) for c in found] == [0, 1, 0], found
    assert found[1][0] == {
        "receipt_sha256": failing,
        "claim_id": "agrees",
        "reason": "2026-12-07: bound <= 1e-3 -> <= 1e-1",
    }
    fresh = gates.pytester.path / "fresh"
    gates.run(receipts=fresh)
    assert corrections(gates, fresh) == [[]]
