"""Claim ids that look alike are alike (issue 52, rule 4): an id with surrounding whitespace,
a control or invisible character, or a form NFKC would change is refused where a receipt is
read, so a record can never list a "missing" id beside a passing twin that looks the same."""

from __future__ import annotations

import sys
import unicodedata
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gates"))

from assay.qualify.core.identifier import id_problem  # noqa: E402
from assay.qualify.ledger.receipt import problems_in, seal  # noqa: E402
from support.faults import tamper_cases  # noqa: E402


def _receipt_with_id(cid: str) -> dict:
    receipt = tamper_cases.synthetic_receipt("2026-01-01T00:00:00Z", 1e-4, "0" * 64)
    receipt["claims"][0]["id"] = cid
    return seal(receipt)


@settings(max_examples=200, deadline=None)
@given(cid=st.text(min_size=1, max_size=20))
def test_an_id_is_refused_exactly_when_it_could_pass_for_another(cid):
    lookalike = (
        cid != cid.strip()
        or unicodedata.normalize("NFKC", cid) != cid
        or any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in cid)
    )
    found = [p for p in problems_in(_receipt_with_id(cid)) if p.startswith("claims[0].id")]
    assert bool(found) == lookalike, (cid, found)
    assert (id_problem(cid) is not None) == lookalike


def test_the_issues_twins_are_refused_and_the_plain_id_kept():
    assert problems_in(_receipt_with_id("b-roundtrip-small")) == []  # the control
    for twin in ("b-roundtrip-small ", "ｂ-roundtrip-small", "b-roundtrip-small\u200b"):
        assert any(p.startswith("claims[0].id") for p in problems_in(_receipt_with_id(twin)))


def test_a_headline_that_only_looks_like_a_claim_id_is_refused():
    """A gate's HEADLINE names a claim id, so it follows the same rule: a headline with a
    trailing space or a ligature is a problem of the receipt (found by the issue-52
    adversary; a record used to call the plain claim's twin "absent")."""
    for headline, refused in (("diff", False), ("diff ", True), ("\ufb01.ok", True)):
        receipt = tamper_cases.synthetic_receipt("2026-01-01T00:00:00Z", 1e-4, "0" * 64)
        receipt["headline_claim"] = headline
        found = [p for p in problems_in(seal(receipt)) if p.startswith("headline_claim")]
        assert bool(found) == refused, (headline, found)
