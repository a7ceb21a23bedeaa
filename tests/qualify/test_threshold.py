"""Thresholds and verdicts: the rules each claim is judged by."""

from __future__ import annotations

import math

import pytest

from assay.errors import AssayError
from assay.qualify import Threshold
from assay.qualify.core.threshold import judge, margin, worse_than


def _claim(op, bound, value, controls):
    return {
        "id": "c",
        "threshold": {"op": op, "value": bound, "tolerance": 0.0},
        "measurement": None if value is None else {"value": value, "unit": ""},
        "controls": [{"name": f"k{i}", "measured": m} for i, m in enumerate(controls)],
    }


@pytest.mark.parametrize(
    ("op", "inside", "outside"),
    [("<", 0.5, 1.0), ("<=", 1.0, 1.5), ("==", 1.0, 1.0000001), (">=", 1.0, 0.5), (">", 1.5, 1.0)],
)
def test_threshold_meets_inside_and_misses_outside(op, inside, outside):
    t = Threshold(op, 1.0)
    assert t.met_by(inside)
    assert not t.met_by(outside)
    assert not t.met_by(math.nan)


def test_threshold_rejects_bad_operator_and_values():
    with pytest.raises(AssayError, match="op"):
        Threshold("~", 1.0)
    with pytest.raises(AssayError, match="value"):
        Threshold("<", math.inf)
    with pytest.raises(AssayError, match="tolerance"):
        Threshold("<", 1.0, tolerance=-0.1)


def test_margin_is_positive_inside_and_negative_outside():
    assert margin("<=", 1.0, 0.25) == 0.75
    assert margin(">=", 1.0, 0.25) == -0.75
    assert margin("==", 1.0, 1.0) == 0.0
    assert margin("==", 1.0, 3.0) == -2.0


def test_verdict_passes_only_with_failing_controls():
    assert judge(_claim("<=", 1.0, 0.5, [2.0]))["verdict"] == "pass"
    assert judge(_claim("<=", 1.0, 0.5, []))["verdict"] == "inconclusive"
    assert judge(_claim("<=", 1.0, 0.5, [2.0, 0.9]))["verdict"] == "inconclusive"
    assert judge(_claim("<=", 1.0, 1.5, [2.0]))["verdict"] == "fail"
    assert judge(_claim("<=", 1.0, None, [2.0]))["verdict"] == "inconclusive"


def test_worse_than_follows_operator_direction_and_tolerance():
    assert worse_than("<=", 0.1, 1.0, 1.2)
    assert not worse_than("<=", 0.1, 1.0, 1.05)
    assert not worse_than("<=", 0.1, 1.0, 0.5)
    assert worse_than(">=", 0.1, 100.0, 80.0)
    assert not worse_than(">=", 0.1, 100.0, 95.0)
    assert worse_than("==", 0.5, 1.0, 1.01)  # equality compares exactly, tolerance ignored
    assert worse_than("<", 0.5, 0.0, 1e-9)  # zero baseline and zero bound: no worsening
    assert not worse_than("<=", 0.1, 0.0, 1e-5, bound=1e-4)  # zero baseline: scale by the bound
    assert worse_than("<=", 0.1, 0.0, 2e-5, bound=1e-4)
    # an error far below its bound is judged on the bound's scale, not its own
    assert not worse_than("<=", 0.1, 3e-8, 6e-8, bound=1e-4)
    assert worse_than("<=", 0.1, 3e-8, 2e-5, bound=1e-4)
    assert worse_than("<=", 0.01, 1.8e8, 1.83e8, bound=1.82e8)
