"""An invalid receipt is never written, and the run that produced it fails."""

from __future__ import annotations

import json

import pytest
from gatekit import PASSING_GATE

from assay.errors import AssayError
from assay.qualify import write_receipt


def _valid_receipt(gates) -> dict:
    gates.write("ok", PASSING_GATE.format(value="0"))
    assert gates.run("--gate-no-render").ret == 0
    receipt = gates.only_receipt("ok")
    del receipt["receipt_sha256"]
    return receipt


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("kind", "speed", "kind"), ("verdict", "maybe", "verdict"), ("id", "", "id")],
)
def test_schema_invalid_claim_is_refused_before_writing(gates, tmp_path, field, value, message):
    receipt = _valid_receipt(gates)
    receipt["claims"][0][field] = value
    with pytest.raises(AssayError, match=message):
        write_receipt(receipt, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_verdict_inconsistent_with_threshold_is_refused(gates, tmp_path):
    receipt = _valid_receipt(gates)
    receipt["claims"][0]["measurement"]["value"] = 1.0  # misses <= 1e-3 but says "pass"
    with pytest.raises(AssayError, match="verdict"):
        write_receipt(receipt, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_valid_receipt_round_trips_through_write(gates, tmp_path):
    receipt = _valid_receipt(gates)
    path = write_receipt(receipt, tmp_path / "out")
    assert path.parent.name == "ok"
    assert json.loads(path.read_text("utf-8"))["claims"] == receipt["claims"]
