"""Timing claims measured with pytest-benchmark's discipline, as plain data for a receipt.

:func:`measure_time` warms the function up, calibrates how many calls one round takes so a
round lasts well above the timer's resolution, then times rounds with the garbage collector
off, on ``time.perf_counter_ns``. The result keeps every round (time per call), so the receipt
can state min, median, quartiles, IQR and outliers, and :meth:`Timing.histogram` can draw them.

A timing claim's control is a measured slower variant, never a constant: :func:`measure_control`
times a deliberately slowed callable with the settings of the claim's own timing and returns the
value for ``claim.control``.
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from assay.errors import AssayError
from assay.qualify.plugin.claim import TIME_UNITS, MeasuredControl

# Calibration accepts a calls-per-round count only when this many rounds in a row all last
# long enough: one round is one sample, and a single preempted round would end it too early.
CALIBRATION_ROUNDS = 3
MAX_ITERATIONS = 1 << 24


def _resolution_ns() -> int:
    """The smallest step perf_counter_ns shows on this machine (at least 1 ns)."""
    smallest = None
    for _ in range(20):
        start = time.perf_counter_ns()
        now = start
        while now == start:
            now = time.perf_counter_ns()
        smallest = now - start if smallest is None else min(smallest, now - start)
    return max(1, smallest or 1)


@dataclass(frozen=True)
class TimingSettings:
    """The keyword arguments of :func:`measure_time`, kept so a control is timed the same way."""

    rounds: int = 30
    warmup_s: float = 0.05
    min_round_s: float = 0.002
    max_time_s: float = 5.0
    timer: Callable[[], int] = time.perf_counter_ns


@dataclass(frozen=True)
class Timing:
    """Rounds of a timed function: ``per_call_ns[i]`` is round i's time divided by its calls.

    ``calibration_rounds`` counts the rounds spent choosing ``iterations`` (not recorded as
    samples); ``settings`` is what :func:`measure_time` ran with (None for outside timings).
    """

    per_call_ns: tuple[float, ...]
    iterations: int
    warmup_rounds: int
    resolution_ns: int
    calibration_rounds: int = 0
    settings: TimingSettings | None = None

    @classmethod
    def from_seconds(cls, seconds: list[float], warmup_rounds: int = 0) -> Timing:
        """Rounds timed elsewhere (one call each, in seconds), e.g. interleaved benchmark
        steps, so they get the same statistics and histogram."""
        if len(seconds) < 1:
            raise AssayError("Timing.from_seconds: expected at least one round")
        return cls(tuple(s * 1e9 for s in seconds), 1, warmup_rounds, 1)

    def stats(self, scale: float = 1.0) -> dict[str, Any]:
        """Summary in seconds times ``scale`` (default 1.0 = s; 1e3 = ms, 1e9 = ns): n, min, q1,
        median, q3, max, iqr, mean, stdev, outliers (rounds beyond 1.5 IQR of the quartiles,
        Tukey's rule), rounds, iterations per round, warm-up rounds and the timer."""
        values = sorted(v * 1e-9 * scale for v in self.per_call_ns)
        n = len(values)
        q1, _, q3 = statistics.quantiles(values, n=4) if n > 1 else (values[0],) * 3
        iqr = q3 - q1
        low, high = q1 - 1.5 * iqr, q3 + 1.5 * iqr
        return {
            "n": n,
            "min": values[0],
            "q1": q1,
            "median": statistics.median(values),
            "q3": q3,
            "max": values[-1],
            "iqr": iqr,
            "mean": statistics.fmean(values),
            "stdev": statistics.stdev(values) if n > 1 else 0.0,
            "outliers": sum(v < low or v > high for v in values),
            "rounds": n,
            "iterations": self.iterations,
            "warmup_rounds": self.warmup_rounds,
            "timer": self._timer_text(),
        }

    def median_in(self, unit: str) -> float:
        """The median time per call in ``unit`` (s, ms, us or ns), as a claim in that unit
        records it."""
        if unit not in TIME_UNITS:
            raise AssayError(f"Timing.median_in: unit {unit!r} is not one of s, ms, us or ns")
        return cast(float, self.stats(1.0 / TIME_UNITS[unit])["median"])

    def _timer_text(self) -> str:
        text = f"perf_counter_ns (resolution {self.resolution_ns} ns), gc off"
        if self.calibration_rounds:
            text += f", {self.calibration_rounds} calibration rounds"
        return text

    def histogram(self, path: str | Path, title: str, unit: str = "ms") -> Path:
        """Write a PNG histogram of the per-call times (needs matplotlib); return its path."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as err:
            raise AssayError("Timing.histogram: matplotlib is not installed") from err
        scale = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[unit]
        values = [v * 1e-9 * scale for v in self.per_call_ns]
        s = self.stats(scale)
        fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
        ax.hist(values, bins=min(40, max(5, len(values) // 3)), color="#4c72b0")
        for x, style, label in ((s["median"], "-", "median"), (s["min"], ":", "min")):
            ax.axvline(x, color="k", linestyle=style, label=f"{label} {x:.4g} {unit}")
        ax.axvspan(s["q1"], s["q3"], color="orange", alpha=0.2, label="IQR")
        ax.set_xlabel(f"time per call ({unit})")
        ax.set_ylabel("rounds")
        ax.set_title(title)
        ax.legend(fontsize=8)
        fig.tight_layout()
        out = Path(path)
        fig.savefig(out)
        plt.close(fig)
        return out


def measure_time(
    fn: Callable[[], Any],
    *,
    rounds: int = 30,
    warmup_s: float = 0.05,
    min_round_s: float = 0.002,
    max_time_s: float = 5.0,
    timer: Callable[[], int] = time.perf_counter_ns,
) -> Timing:
    """Time ``fn()``: warm up for ``warmup_s``, calibrate calls per round so that
    ``CALIBRATION_ROUNDS`` rounds in a row each last at least ``min_round_s`` (and 100 timer
    steps), then run up to ``rounds`` rounds within ``max_time_s`` (at least 3). The collector
    is disabled while timing and restored after; the settings travel with the result.
    """
    if rounds < 3:
        raise AssayError(f"measure_time rounds: expected at least 3, got {rounds}")
    settings = TimingSettings(rounds, warmup_s, min_round_s, max_time_s, timer)
    resolution = _resolution_ns()
    min_round_ns = max(int(min_round_s * 1e9), 100 * resolution)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        warmup_rounds = _warm_up(fn, warmup_s, timer)
        iterations, calibration_rounds = _calibrate(fn, min_round_ns, timer)
        per_call = _timed_rounds(fn, iterations, rounds, max_time_s, timer)
    finally:
        if was_enabled:
            gc.enable()
    return Timing(
        tuple(per_call), iterations, warmup_rounds, resolution, calibration_rounds, settings
    )


def measure_control(
    slower: Callable[[], Any], *, like: Timing, unit: str, **overrides: Any
) -> MeasuredControl:
    """Time ``slower`` (a deliberately slowed variant of the claim's subject) with the
    :func:`measure_time` settings that produced ``like``, and return its median time per call
    in ``unit``: the value to pass to ``claim.control``. ``overrides`` replace single settings
    (e.g. ``rounds=5`` for a very slow variant); the warm-up, calibration and collector rules
    stay those of ``like``.
    """
    if like.settings is None:
        raise AssayError("measure_control: like= must come from measure_time (it has no settings)")
    settings = dataclasses.replace(like.settings, **overrides)
    # fields one by one, not asdict(): asdict would deep-copy the timer callable
    kwargs = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
    return MeasuredControl(measure_time(slower, **kwargs).median_in(unit), unit)


def _warm_up(fn: Callable[[], Any], warmup_s: float, timer: Callable[[], int]) -> int:
    """Call ``fn`` until ``warmup_s`` has passed (at least once); return the calls made."""
    calls, deadline = 0, timer() + int(warmup_s * 1e9)
    while True:  # caches, lazy init, branch predictors; not recorded
        fn()
        calls += 1
        if timer() >= deadline:
            return calls


def _round_ns(fn: Callable[[], Any], iterations: int, timer: Callable[[], int]) -> int:
    start = timer()
    for _ in range(iterations):
        fn()
    return timer() - start


def _calibrate(
    fn: Callable[[], Any], min_round_ns: int, timer: Callable[[], int]
) -> tuple[int, int]:
    """Double calls per round until ``CALIBRATION_ROUNDS`` rounds in a row each last
    ``min_round_ns`` (or the count reaches ``MAX_ITERATIONS``); return (calls per round,
    calibration rounds run)."""
    iterations, rounds_run = 1, 0
    while True:
        for _ in range(CALIBRATION_ROUNDS):
            rounds_run += 1
            if _round_ns(fn, iterations, timer) < min_round_ns:
                break
        else:
            return iterations, rounds_run
        if iterations >= MAX_ITERATIONS:
            return iterations, rounds_run
        iterations *= 2


def _timed_rounds(
    fn: Callable[[], Any],
    iterations: int,
    rounds: int,
    max_time_s: float,
    timer: Callable[[], int],
) -> list[float]:
    """Up to ``rounds`` rounds of ``iterations`` calls within ``max_time_s`` (at least 3);
    return each round's time per call in ns."""
    per_call: list[float] = []
    budget_end = timer() + int(max_time_s * 1e9)
    while len(per_call) < rounds and (len(per_call) < 3 or timer() < budget_end):
        per_call.append(_round_ns(fn, iterations, timer) / iterations)
    return per_call
