"""The small rules a verdict rests on, each pinned: default tolerance modes, the direction an
operator implies, what a tolerance is a fraction of, threshold validation, and the one line
that explains a claim that did not pass."""

from __future__ import annotations

import pytest

from assay.errors import AssayError
from assay.qualify import Threshold, Tolerance
from assay.qualify.core.threshold import (
    default_mode,
    explain,
    judge,
    lower_is_better,
    tolerance_base,
    tolerance_of,
)


def test_each_kind_gets_its_default_tolerance_mode():
    assert default_mode("performance") == "relative"
    assert default_mode("correctness") == "threshold_scaled"
    assert default_mode("memory") == "threshold_scaled"
    assert Threshold("<=", 1.0, 0.1).to_dict() == {
        "op": "<=",
        "value": 1.0,
        "tolerance": {"mode": "threshold_scaled", "value": 0.1},
    }
    assert Threshold(">=", 2.0, 0.5).to_dict("performance")["tolerance"]["mode"] == "relative"


@pytest.mark.parametrize(
    ("op", "lower"), [("<", True), ("<=", True), (">", False), (">=", False), ("==", None)]
)
def test_operators_say_which_way_is_better(op, lower):
    assert lower_is_better(op) is lower


def test_a_tolerance_is_a_fraction_of_what_its_mode_names():
    assert tolerance_base("relative", -4.0, 100.0) == 4.0
    assert tolerance_base("threshold_scaled", 3e-8, -1e-4) == 1e-4
    assert tolerance_base("threshold_scaled", -5.0, 1e-4) == 5.0
    assert tolerance_base("absolute", 4.0, 100.0) == 1.0
    assert tolerance_of({"tolerance": {"mode": "absolute", "value": 2.5}}) == ("absolute", 2.5)
    assert tolerance_of({"tolerance": 0.25}) == ("threshold_scaled", 0.25)


def test_tolerance_constructors_name_their_mode():
    assert Tolerance.absolute(2.0) == Tolerance("absolute", 2.0)
    assert Tolerance.relative(0.5).to_dict() == {"mode": "relative", "value": 0.5}
    assert Tolerance.threshold_scaled(0.1).mode == "threshold_scaled"
    with pytest.raises(AssayError, match=r"^Tolerance.mode: expected one of .*, got 'loose'$"):
        Tolerance("loose", 0.1)


@pytest.mark.parametrize("value", [True, "1", None])
def test_a_threshold_value_must_be_a_real_number(value):
    with pytest.raises(AssayError, match=rf"^Threshold.value: expected a number, got {value!r}$"):
        Threshold("<=", value)


def _claim(value, controls, unit="ulp"):
    claim = {
        "id": "err",
        "unit": unit,
        "threshold": {"op": "<=", "value": 2.0, "tolerance": 0.0},
        "measurement": None if value is None else {"value": value},
        "controls": [{"name": n, "measured": m} for n, m in controls],
    }
    return claim, judge(claim)


def test_explain_says_why_each_claim_did_not_pass():
    assert explain(*_claim(1.0, [("broken", 9.0)])) == ""
    assert (
        explain(*_claim(None, [])) == "claim 'err' inconclusive: it was declared but never measured"
    )
    assert explain(*_claim(3.0, [])) == "claim 'err' fails: measured 3 ulp, threshold <= 2"
    assert explain(*_claim(3.0, [], unit="")) == "claim 'err' fails: measured 3 , threshold <= 2"
    assert explain(*_claim(1.0, [])) == (
        "claim 'err' inconclusive: no control declared, so the check is not shown able to fail"
    )
    assert explain(*_claim(1.0, [("broken", 9.0), ("blunt", 0.5)])) == (
        "claim 'err' inconclusive: control 'blunt' measured 0.5 met the threshold <= 2; "
        "the check cannot fail"
    )
