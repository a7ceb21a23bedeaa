"""Canonical JSON and the receipt sha256: stable across key order, files and unicode."""

from __future__ import annotations

import hashlib
import json
import math

import pytest

from assay.qualify import canonical_json, receipt_sha256


def test_canonical_json_is_sorted_compact_utf8():
    obj = {"b": [1, 2.5], "a": {"y": "ü", "x": None}}
    expected = '{"a":{"x":null,"y":"ü"},"b":[1,2.5]}'.encode()
    assert canonical_json(obj) == expected


def test_receipt_sha_ignores_key_order_and_its_own_field():
    a = {"gate": "g", "claims": [{"id": "x", "v": 1e-5}], "notes": ["naïve"]}
    b = {"notes": ["naïve"], "claims": [{"v": 1e-5, "id": "x"}], "gate": "g"}
    sha = receipt_sha256(a)
    assert sha == receipt_sha256(b)
    assert sha == receipt_sha256({**a, "receipt_sha256": "f" * 64})
    text = '{"claims":[{"id":"x","v":1e-05}],"gate":"g","notes":["naïve"]}'
    assert sha == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_receipt_sha_survives_a_round_trip_through_a_file(tmp_path):
    r = {"value": 0.1 + 0.2, "big": 134515008, "tiny": 3.1e-5, "s": "日本"}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(r, indent=2, ensure_ascii=False), encoding="utf-8")
    assert receipt_sha256(json.loads(path.read_text("utf-8"))) == receipt_sha256(r)


def test_receipt_sha_changes_with_any_value():
    assert receipt_sha256({"v": 1.0}) != receipt_sha256({"v": 1.0000000001})


def test_canonical_json_refuses_nan():
    with pytest.raises(ValueError):
        canonical_json({"v": math.nan})
