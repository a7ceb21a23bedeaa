"""Gate: toystats.median is fast, timed like pytest-benchmark, with a quadratic control."""

from __future__ import annotations

import random

import toystats

from assay.errors import AssayError
from assay.qualify import Threshold, Tolerance, measure_control, measure_time

N = 2000


def test_median_time(gate, tmp_path):
    gate.seed(7)
    rng = random.Random(7)
    values = [rng.random() for _ in range(N)]
    claim = gate.claim(
        "median-time",
        f"median() of {N} floats takes under 5 ms per call (median of calibrated rounds)",
        kind="performance",
        # a timing regresses when it is 50 % slower than the baseline receipt's timing
        threshold=Threshold("<", 5.0, tolerance=Tolerance.relative(0.5)),
        unit="ms",
        code=["toystats"],
    )
    timing = measure_time(lambda: toystats.median(values), rounds=40)
    claim.measure(timing=timing)
    # the control: an O(n^2) median, timed like the claim (fewer rounds: it is slow), must miss
    slow = measure_control(
        lambda: toystats.naive_median(values), like=timing, unit="ms", rounds=3, warmup_s=0
    )
    claim.control("O(n^2) median by counting", slow)
    try:
        figure = timing.histogram(tmp_path / "median-time.png", f"median() of {N} floats")
    except AssayError as err:  # matplotlib is optional for the framework-only install
        gate.note(f"no histogram figure: {err}")
    else:
        gate.figure(figure, f"Time per call of median() over {timing.stats()['n']} rounds")
    gate.not_tested("inputs above 10^6 elements", "the claim is about small in-memory lists")
