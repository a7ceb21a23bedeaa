"""I4, numbers are finite: NaN or infinity in a measurement, a sample, a timing or a control
never reads as pass. The claim fails (or, for a control, cannot pass), the receipt is written
so the ledger keeps the failure, the value is shown, and pytest fails."""

from __future__ import annotations

import math

import pytest

from assay.qualify.core.threshold import judge

MEASURE = """
def test_loss(gate):
    c = gate.claim("loss", "finite loss", kind="correctness", threshold=Threshold({op!r}, {bound}))
    c.{call}
    c.control("diverged", {control})
"""

CASES = {
    "nan value": ("<", 1, 'measure(float("nan"))', 5, "nan"),
    "inf value meets >=": (">=", 1, 'measure(float("inf"))', 0, "inf"),
    "-inf value meets <=": ("<=", 1, 'measure(float("-inf"))', 5, "-inf"),
    "one nan among zero samples": ("==", 0, 'measure(samples=[0] * 7 + [float("nan")])', 3, "nan"),
    "only nan samples": ("<", 1, 'measure(samples=[float("nan")] * 3)', 5, "nan"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_non_finite_measurement_fails_its_claim_and_is_shown(gates, case):
    op, bound, call, control, kind = CASES[case]
    gates.write("finite", MEASURE.format(op=op, bound=bound, call=call, control=control))
    result = gates.run()
    assert result.ret != 0
    receipt = gates.only_receipt("finite")
    (claim,) = receipt["claims"]
    assert (claim["verdict"], receipt["status"]) == ("fail", "fail")
    assert claim["measurement"]["value"] is None
    assert claim["measurement"]["non_finite"] == kind
    record = (gates.records / "finite.md").read_text("utf-8")
    assert "**Status: FAIL**" in record
    assert f"{kind} (not a finite number" in record


def test_samples_keep_the_count_of_non_finite_ones_beside_the_finite_spread(gates):
    call = 'measure(samples=[0, 0, 0, 0, 0, 0, 0, float("nan")])'
    gates.write("finite", MEASURE.format(op="==", bound=0, call=call, control=3))
    gates.run()
    samples = gates.only_receipt("finite")["claims"][0]["measurement"]["samples"]
    assert (samples["n"], samples["non_finite"], samples["max"]) == (8, 1, 0)
    assert "1 of 8 samples not finite" in (gates.records / "finite.md").read_text("utf-8")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -math.inf])
def test_a_non_finite_control_shows_nothing_so_the_claim_cannot_pass(gates, value):
    call = "measure(0.0)"
    gates.write("finite", MEASURE.format(op="<", bound=1, call=call, control=f"float('{value}')"))
    assert gates.run().ret != 0
    (claim,) = gates.only_receipt("finite")["claims"]
    assert claim["verdict"] == "inconclusive"
    (control,) = claim["controls"]
    assert (control["measured"], control["failed"]) == (None, False)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("op", ["<", "<=", "==", ">=", ">"])
def test_judge_never_passes_a_non_finite_value_whatever_the_operator(value, op):
    claim = {
        "id": "x",
        "threshold": {"op": op, "value": 0.0},
        "measurement": {"value": value},
        "controls": [{"name": "k", "measured": 1e9 if op in ("<", "<=", "==") else -1e9}],
    }
    assert judge(claim)["verdict"] == "fail"


def test_finite_samples_whose_arithmetic_overflows_still_give_a_receipt(gates):
    call = "measure(samples=[1.7e308, 1.7e308, -1.7e308])"
    gates.write("finite", MEASURE.format(op=">=", bound=1e300, call=call, control=1e299))
    assert gates.run().ret == 0
    (claim,) = gates.only_receipt("finite")["claims"]
    assert claim["verdict"] == "pass" and claim["measurement"]["value"] == 1.7e308
    assert "q1" not in claim["measurement"]["samples"]  # the quartile spread overflows


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("10**400", "not a number a float can hold"),
        ("__import__('decimal').Decimal('sNaN')", "signaling"),
    ],
)
def test_a_number_a_float_cannot_hold_is_one_clear_error(gates, value, said):
    gates.write("finite", MEASURE.format(op="<", bound=1, call=f"measure({value})", control=5))
    result = gates.run()
    assert result.ret != 0
    result.stdout.fnmatch_lines([f"*AssayError: claim 'loss' measure*{said}*"])


def test_numbers_past_a_floats_range_are_refused_in_one_line():
    from decimal import Decimal

    from assay.errors import AssayError
    from assay.qualify import Threshold, Tolerance
    from assay.qualify.plugin.claim import _number

    with pytest.raises(AssayError, match="expected a finite number"):
        Threshold("<=", 10**400)
    with pytest.raises(AssayError, match="expected a finite number"):
        Threshold("<=", 1, tolerance=10**400)
    with pytest.raises(AssayError, match="expected a finite number"):
        Tolerance.relative(10**400)
    for value in (10**400, Decimal("1e400"), Decimal("-1e400")):
        with pytest.raises(AssayError, match="is not a number a float can hold"):
            _number(value, "claim 'x' measure")
    assert _number(Decimal("Infinity"), "x") == float("inf")  # said to be infinite: kept as such


@pytest.mark.parametrize("where", ["value", "bound", "control"])
def test_an_integer_no_float_holds_makes_a_receipt_invalid_at_its_field(where):
    """A sealed receipt carrying 10**400 (JSON allows it) is refused where it sits, never fed
    to a comparison that would overflow."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gates"))
    from assay.qualify.ledger.receipt import problems_in, seal
    from support.faults import tamper_cases

    receipt = tamper_cases.synthetic_receipt("2026-01-01T00:00:00Z", 1e-4, "0" * 64)
    claim = receipt["claims"][0]
    target = {"value": claim["measurement"], "bound": claim["threshold"]}.get(where)
    if target is None:
        claim["controls"][0]["measured"] = 10**400
    else:
        target["value"] = 10**400
    problems = problems_in(seal(receipt))
    assert problems and "integer too large for a float" in problems[0], problems
    ok = tamper_cases.synthetic_receipt("2026-01-01T00:00:00Z", 1e-4, "0" * 64)
    assert problems_in(seal(ok)) == []  # the control
