"""Tolerances name their base (relative, absolute, threshold-scaled); baselines never read the
session's own receipts; Change and Tolerance share one base."""

from __future__ import annotations

import pytest

from assay.errors import AssayError
from assay.qualify.core.threshold import Threshold, Tolerance, worse_than
from assay.qualify.judging.baseline import compare, refuse_self_baseline


def _claim(value, threshold):
    return {"id": "c", "verdict": "pass", "measurement": {"value": value}, "threshold": threshold}


def test_a_twelvefold_slowdown_fails_a_relative_fifty_percent_tolerance():
    # throughput >= 10 tok/s, baseline 1200, now 100: 12x slower yet above the bound
    assert worse_than(">=", 0.5, 1200, 100, 10, mode="relative")
    assert not worse_than(">=", 0.5, 1200, 700, 10, mode="relative")


def test_threshold_scaled_lets_an_error_far_below_its_bound_drift():
    assert not worse_than("<=", 0.1, 3e-8, 9e-6, 1e-4, mode="threshold_scaled")
    assert worse_than("<=", 0.1, 3e-8, 9e-6, 1e-4, mode="relative")


def test_absolute_tolerance_is_in_the_unit():
    assert not worse_than("<=", 2.0, 10.0, 11.9, 100.0, mode="absolute")
    assert worse_than("<=", 2.0, 10.0, 12.1, 100.0, mode="absolute")


def test_a_bare_number_takes_the_kind_default_and_the_receipt_names_it():
    t = Threshold(">=", 10, tolerance=0.5)
    assert t.to_dict("performance")["tolerance"] == {"mode": "relative", "value": 0.5}
    assert t.to_dict("correctness")["tolerance"] == {"mode": "threshold_scaled", "value": 0.5}
    explicit = Threshold("<=", 1, tolerance=Tolerance.absolute(0.25)).to_dict("performance")
    assert explicit["tolerance"] == {"mode": "absolute", "value": 0.25}
    with pytest.raises(AssayError, match=r"Tolerance\.mode"):
        Tolerance("percent", 1)


def test_change_and_tolerance_columns_share_the_tolerance_base():
    now = _claim(100, Threshold(">=", 10, Tolerance.relative(0.5)).to_dict("performance"))
    baseline = {
        "gate": "g",
        "receipt_sha256": "0" * 64,
        "created": "x",
        "claims": [_claim(1200, now["threshold"])],
    }
    (row,) = compare([now], baseline, "b")["comparisons"]
    assert row["tolerance_mode"] == "relative" and row["regressed"]
    assert row["change"] == pytest.approx((100 - 1200) / 1200) and row["tolerance"] == 0.5
    scaled = _claim(9e-6, Threshold("<=", 1e-4, 0.1).to_dict("correctness"))
    baseline["claims"] = [_claim(3e-8, scaled["threshold"])]
    (row,) = compare([scaled], baseline, "b")["comparisons"]
    # both columns are fractions of max(|baseline|, |threshold|) = 1e-4
    assert row["change"] == pytest.approx((9e-6 - 3e-8) / 1e-4) and not row["regressed"]


def test_old_receipts_with_a_bare_tolerance_still_compare():
    old = _claim(5, {"op": "<=", "value": 10, "tolerance": 0.1})
    baseline = {"gate": "g", "receipt_sha256": "0" * 64, "created": "x", "claims": [old]}
    (row,) = compare([old], baseline, "b")["comparisons"]
    assert row["tolerance_mode"] == "threshold_scaled" and not row["regressed"]


def test_a_baseline_overlapping_the_receipts_dir_is_refused(tmp_path):
    receipts = tmp_path / "records" / "receipts"
    assert refuse_self_baseline(receipts, receipts)
    assert refuse_self_baseline(tmp_path / "records", receipts)  # holds the receipts
    assert refuse_self_baseline(receipts / "logits", receipts)  # inside them
    assert refuse_self_baseline(tmp_path / "published", receipts) is None


def test_running_with_the_receipts_dir_as_baseline_is_a_usage_error(gates):
    gates.write("self", "def test_x(gate):\n    pass\n")
    result = gates.run(f"--gate-baseline={gates.receipts}")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*overlaps --gate-receipts*"])
