"""How a receipt lands on disk: byte-stable text, its file name, the atomic append-only write,
and the consistency checks a hand-made receipt must pass."""

from __future__ import annotations

import json
import os

import pytest

from assay.errors import AssayError
from assay.qualify.core.threshold import judge
from assay.qualify.ledger.receipt import (
    SHA_FIELD,
    _consistency,
    dump_receipt,
    problems_in,
    receipt_filename,
    write_atomic,
)


def test_dumped_receipts_are_sorted_indented_utf8_with_a_final_newline():
    data = dump_receipt({"b": 1, "a": "naïve ✓"})
    assert data == '{\n  "a": "naïve ✓",\n  "b": 1\n}\n'.encode()


def test_a_receipt_file_is_named_by_its_second_and_sha():
    receipt = {"created": "2026-12-02T15:17:21Z", SHA_FIELD: "ae8bad4da89d" + "0" * 52}
    assert receipt_filename(receipt) == "20261202T151721Z-ae8bad4da89d.json"
    receipt["created"] = "2026-12-02T15:17:21.123456Z"
    assert receipt_filename(receipt) == "20261202T151721Z-ae8bad4da89d.json"


def test_atomic_writes_make_folders_use_a_temp_file_beside_the_target_and_never_clobber(
    tmp_path, monkeypatch
):
    target = tmp_path / "deep" / "er" / "r.json"
    seen = []
    real_link = os.link
    monkeypatch.setattr(os, "link", lambda src, dst: (seen.append(src), real_link(src, dst)))
    write_atomic(target, b"one", overwrite=False)
    assert target.read_bytes() == b"one"
    assert os.path.dirname(seen[0]) == str(target.parent)  # same folder: rename is atomic
    with pytest.raises(AssayError, match="already exists; receipts are never overwritten"):
        write_atomic(target, b"two", overwrite=False)
    assert target.read_bytes() == b"one"
    assert sorted(p.name for p in target.parent.iterdir()) == ["r.json"]  # no temp left
    write_atomic(target, b"three", overwrite=True)
    assert target.read_bytes() == b"three"


def _claim(claim_id):
    claim = {
        "id": claim_id,
        "threshold": {"op": "<=", "value": 1.0, "tolerance": 0.0},
        "measurement": {"value": 0.5},
        "controls": [{"name": "k", "measured": 3.0}],
    }
    judged = judge(claim)
    return {**claim, "verdict": judged["verdict"], "controls": judged["controls"]}


def test_claim_ids_must_be_unique_and_verdicts_must_follow_the_data():
    passing = {"claims": [_claim("a"), _claim("b")], "status": "pass"}
    assert _consistency(passing) == []
    assert _consistency({"claims": [_claim("a"), _claim("a")], "status": "pass"}) == [
        "claims: id 'a' appears more than once"
    ]
    wrong = _claim("a")
    wrong["verdict"] = "fail"
    assert _consistency({"claims": [wrong], "status": "fail"}) == [
        "claims[0].verdict: 'fail' but the data give 'pass'"
    ]


def test_a_status_that_its_claims_do_not_give_is_refused():
    failing = _claim("a")
    failing["measurement"] = {"value": 2.0}
    failing.update(verdict="fail", margin=-1.0)
    for status, claims in (("pass", [failing]), ("fail", [_claim("a")]), ("pass", [])):
        (problem,) = _consistency({"claims": claims, "status": status})
        assert problem.startswith(f"status: {status!r} but its claims and tests give")


def test_a_non_finite_number_is_named_by_its_path_from_the_receipt():
    assert problems_in({"claims": [{"x": float("inf")}]}) == [
        "receipt.claims[0].x: inf is not a finite number (JSON cannot carry it)"
    ]
    assert json.dumps(problems_in({"a": 1}))  # schema problems, not a crash
