"""The timing helper: warm-up, calibrated rounds, GC off, robust statistics, a histogram."""

from __future__ import annotations

import gc

import pytest

from assay.errors import AssayError
from assay.qualify.timing import Timing, measure_time

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_measure_time_calibrates_rounds_and_restores_the_collector():
    calls = []
    timing = measure_time(lambda: calls.append(1), rounds=5, warmup_s=0.001, min_round_s=1e-4)
    stats = timing.stats()
    assert stats["rounds"] == 5 and stats["iterations"] >= 1 and stats["warmup_rounds"] >= 1
    assert len(calls) >= stats["warmup_rounds"] + stats["iterations"] * 5  # + calibration
    assert stats["min"] <= stats["q1"] <= stats["median"] <= stats["q3"] <= stats["max"]
    assert gc.isenabled()


def test_gc_is_off_while_timing():
    seen = []
    measure_time(lambda: seen.append(gc.isenabled()), rounds=3, warmup_s=0, min_round_s=0)
    assert seen and not any(seen)


def test_outliers_follow_tukeys_rule():
    timing = Timing((10.0,) * 9 + (1000.0,), iterations=1, warmup_rounds=0, resolution_ns=1)
    stats = timing.stats(scale=1e9)  # in ns
    assert stats["outliers"] == 1 and stats["median"] == 10.0 and stats["iqr"] == 0.0


def test_a_timing_claim_records_statistics_in_its_unit(gates):
    gates.write(
        "clock",
        """
from assay.qualify.timing import Timing

def test_t(gate):
    c = gate.claim("t", "fast", kind="performance", threshold=Threshold("<", 5), unit="ms")
    c.measure(timing=Timing((1e6, 2e6, 3e6), iterations=4, warmup_rounds=2, resolution_ns=1))
    c.control("slow", 50)
""",
    )
    assert gates.run("--gate-no-render").ret == 0
    m = gates.only_receipt("clock")["claims"][0]["measurement"]
    assert m["value"] == 2.0 and m["timing"]["iterations"] == 4 and m["samples"]["n"] == 3


def test_histogram_is_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    timing = Timing((1e6, 1.1e6, 0.9e6, 1.05e6), iterations=1, warmup_rounds=0, resolution_ns=1)
    path = timing.histogram(tmp_path / "h.png", "t")
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_a_timing_needs_a_time_unit():
    from assay.qualify.gate import Gate
    from assay.qualify.threshold import Threshold

    g = Gate("g", "cpu", "n", __import__("pathlib").Path.cwd())
    claim = g.claim("c", "s", kind="performance", threshold=Threshold("<", 1), unit="tok/s")
    with pytest.raises(AssayError, match="unit s, ms, us or ns"):
        claim.measure(timing=Timing((1.0, 2.0), 1, 0, 1))
