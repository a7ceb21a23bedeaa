"""The timing helper: warm-up, calibrated rounds, GC off, robust statistics, a histogram."""

from __future__ import annotations

import gc
import time

import pytest

from assay.errors import AssayError
from assay.qualify.plugin.timing import Timing, measure_control, measure_time

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_measure_time_calibrates_rounds_and_restores_the_collector():
    calls = []
    timing = measure_time(lambda: calls.append(1), rounds=5, warmup_s=0.001, min_round_s=1e-4)
    stats = timing.stats()
    assert stats["rounds"] == 5 and stats["iterations"] >= 1 and stats["warmup_rounds"] >= 1
    assert len(calls) >= stats["warmup_rounds"] + stats["iterations"] * 5  # + calibration
    assert stats["min"] <= stats["q1"] <= stats["median"] <= stats["q3"] <= stats["max"]
    assert gc.isenabled()


class FakeClock:
    """A timer that advances only when the timed function runs: ``cost_ns`` per call, or the
    next entry of ``costs_ns`` while any remain (a preempted call, say)."""

    def __init__(self, cost_ns: int, costs_ns: tuple[int, ...] = ()) -> None:
        self.now, self.calls, self.cost_ns, self.costs_ns = 0, 0, cost_ns, list(costs_ns)

    def __call__(self) -> int:
        return self.now

    def tick(self) -> None:
        self.calls += 1
        self.now += self.costs_ns.pop(0) if self.costs_ns else self.cost_ns


def test_a_one_millisecond_sleep_reports_about_a_millisecond_by_default():
    median = measure_time(lambda: time.sleep(0.001), rounds=3, warmup_s=0).stats()["median"]
    assert 1e-3 <= median < 0.05  # seconds; generous above for a loaded machine


def test_stats_default_to_seconds():
    clock = FakeClock(cost_ns=1_000_000)
    timing = measure_time(clock.tick, rounds=3, warmup_s=0, min_round_s=0.0035, timer=clock)
    assert timing.stats()["median"] == pytest.approx(1e-3)
    assert timing.stats(scale=1e3)["median"] == pytest.approx(1.0) == timing.median_in("ms")


def test_calibration_measures_several_rounds_of_the_count_it_keeps():
    clock = FakeClock(cost_ns=1_000_000)  # 1 ms a call: 4 calls make a 3.5 ms round
    timing = measure_time(clock.tick, rounds=3, warmup_s=0, min_round_s=0.0035, timer=clock)
    assert timing.iterations == 4 and timing.calibration_rounds > 1
    calibration_calls = clock.calls - timing.warmup_rounds - 3 * timing.iterations
    assert calibration_calls >= 2 * timing.iterations  # the kept count timed more than once


def test_one_preempted_round_does_not_end_calibration():
    # the warm-up call costs 1 ms, then the first calibration call is preempted for 50 ms
    clock = FakeClock(cost_ns=1_000_000, costs_ns=(1_000_000, 50_000_000))
    timing = measure_time(clock.tick, rounds=3, warmup_s=0, min_round_s=0.0035, timer=clock)
    assert timing.iterations == 4


def test_a_control_is_a_measured_slower_variant():
    fast = measure_time(lambda: time.sleep(0.001), rounds=3, warmup_s=0)
    slower = measure_control(lambda: time.sleep(0.004), like=fast, unit="ms")
    assert slower > fast.median_in("ms") and 4.0 <= slower < 50.0


def test_a_control_is_timed_with_the_settings_of_its_claim():
    clock = FakeClock(cost_ns=1_000_000)
    fast = measure_time(clock.tick, rounds=4, warmup_s=0, min_round_s=0.0035, timer=clock)

    def three_times_slower() -> None:
        for _ in range(3):
            clock.tick()

    before = clock.calls
    assert measure_control(three_times_slower, like=fast, unit="us") == pytest.approx(3000.0)
    slow_calls = (clock.calls - before) // 3
    assert slow_calls >= 1 + 4 * 2  # warm-up + rounds=4 of 2 calls (3 ms each), on fast's clock
    assert measure_control(three_times_slower, like=fast, unit="s", rounds=3) > 0


def test_a_control_needs_a_timing_from_measure_time():
    with pytest.raises(AssayError, match="like= must come from measure_time"):
        measure_control(lambda: None, like=Timing.from_seconds([1.0]), unit="s")


def test_gc_is_off_while_timing():
    seen = []
    measure_time(lambda: seen.append(gc.isenabled()), rounds=3, warmup_s=0, min_round_s=0)
    assert seen and not any(seen)


def test_outliers_follow_tukeys_rule():
    timing = Timing((10.0,) * 9 + (1000.0,), iterations=1, warmup_rounds=0, resolution_ns=1)
    stats = timing.stats(scale=1e9)  # in ns
    assert stats["outliers"] == 1 and stats["median"] == 10.0 and stats["iqr"] == 0.0


CLOCK = """
from assay.qualify.plugin.claim import MeasuredControl
from assay.qualify.plugin.timing import Timing

def test_t(gate):
    c = gate.claim("t", "fast", kind="performance", threshold=Threshold({bound}), unit="{unit}")
    c.measure(timing=Timing((1e6, 2e6, 3e6), iterations=4, warmup_rounds=2, resolution_ns=1))
    c.control("slow", MeasuredControl({control}))
"""


def test_a_timing_claim_records_statistics_in_its_unit(gates):
    gates.write("clock", CLOCK.format(bound='"<", 5', unit="ms", control='50, "ms"'))
    assert gates.run("--gate-no-render").ret == 0
    m = gates.only_receipt("clock")["claims"][0]["measurement"]
    assert m["value"] == 2.0 and m["timing"]["iterations"] == 4 and m["samples"]["n"] == 3


def test_a_control_timed_in_another_unit_is_read_in_the_claims_unit(gates):
    # 30 us is 3e-05 s: under the 0.01 s bound, so this control fails to miss it
    gates.write("clock", CLOCK.format(bound='"<=", 0.01', unit="s", control='30, "us"'))
    assert gates.run("--gate-no-render").ret != 0
    claim = gates.only_receipt("clock")["claims"][0]
    assert claim["controls"][0]["measured"] == pytest.approx(3e-5)
    assert claim["verdict"] != "pass"


@pytest.mark.parametrize(
    ("measure", "unit"),
    [
        ("samples=[0.1, 0.2, 0.3]", "ms"),
        ("0.2", "ms"),
        ("0.2", "msec"),
        ("0.2", "Seconds"),
        ("0.2", "\u03bcs"),
        ("0.2", "min"),
    ],
)
def test_a_performance_claim_in_a_time_unit_refuses_a_typed_control(gates, measure, unit):
    gates.write(
        "clock",
        f"""
def test_t(gate):
    c = gate.claim("t", "fast", kind="performance", threshold=Threshold("<=", 1), unit="{unit}")
    c.measure({measure})
    c.control("naive version, from an old benchmark", 100.0)
""",
    )
    result = gates.run("--gate-no-render")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*a timing claim's control is a measured slower variant*"])


def test_a_timed_control_for_a_claim_not_in_time_units_is_refused():
    from assay.errors import AssayError
    from assay.qualify.plugin.claim import MeasuredControl

    with pytest.raises(AssayError, match="cannot be compared with a claim in 'tokens'"):
        MeasuredControl(3, "ms").in_unit("tokens", "claim 't' control")
    with pytest.raises(AssayError, match="not one of s, ms, us or ns"):
        MeasuredControl(3, "minutes")


def test_histogram_is_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    timing = Timing((1e6, 1.1e6, 0.9e6, 1.05e6), iterations=1, warmup_rounds=0, resolution_ns=1)
    path = timing.histogram(tmp_path / "h.png", "t")
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_a_timing_needs_a_time_unit():
    from assay.qualify.core.threshold import Threshold
    from assay.qualify.plugin.gate import Gate

    g = Gate("g", "cpu", "n", __import__("pathlib").Path.cwd())
    claim = g.claim("c", "s", kind="performance", threshold=Threshold("<", 1), unit="tok/s")
    with pytest.raises(AssayError, match="unit s, ms, us or ns"):
        claim.measure(timing=Timing((1.0, 2.0), 1, 0, 1))


@pytest.mark.parametrize("order", ["control first", "measure first"])
def test_a_typed_constant_is_no_control_for_a_timing_claim(gates, order):
    steps = [
        'c.control("a slow one would take a second", 1e6)',
        "c.measure(timing=Timing((1e6, 2e6, 3e6), iterations=4, warmup_rounds=2, resolution_ns=1))",
    ]
    body = "\n    ".join(steps if order == "control first" else steps[::-1])
    gates.write(
        "clock",
        f"""
from assay.qualify.plugin.timing import Timing

def test_t(gate):
    c = gate.claim("t", "fast", kind="performance", threshold=Threshold("<", 5), unit="ms")
    {body}
""",
    )
    result = gates.run()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*measured slower variant*"])
    assert gates.only_receipt("clock")["status"] != "pass"
