"""Timing claims measured with pytest-benchmark's discipline, as plain data for a receipt.

:func:`measure_time` warms the function up, calibrates how many calls one round takes so a
round lasts well above the timer's resolution, then times rounds with the garbage collector
off, on ``time.perf_counter_ns``. The result keeps every round (time per call), so the receipt
can state min, median, quartiles, IQR and outliers, and :meth:`Timing.histogram` can draw them.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.errors import AssayError


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
class Timing:
    """Rounds of a timed function: ``per_call_ns[i]`` is round i's time divided by its calls."""

    per_call_ns: tuple[float, ...]
    iterations: int
    warmup_rounds: int
    resolution_ns: int

    @classmethod
    def from_seconds(cls, seconds: list[float], warmup_rounds: int = 0) -> Timing:
        """Rounds timed elsewhere (one call each, in seconds), e.g. interleaved benchmark
        steps, so they get the same statistics and histogram."""
        if len(seconds) < 1:
            raise AssayError("Timing.from_seconds: expected at least one round")
        return cls(tuple(s * 1e9 for s in seconds), 1, warmup_rounds, 1)

    def stats(self, scale: float = 1e-9) -> dict[str, Any]:
        """Summary in seconds times ``scale`` (1.0 = s, 1e3 = ms): n, min, q1, median, q3, max,
        iqr, mean, stdev, outliers (rounds beyond 1.5 IQR of the quartiles, Tukey's rule),
        rounds, iterations per round, warm-up rounds and the timer."""
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
            "timer": f"perf_counter_ns (resolution {self.resolution_ns} ns), gc off",
        }

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
    """Time ``fn()``: warm up for ``warmup_s``, calibrate calls per round so one round lasts
    at least ``min_round_s`` (and 100 timer steps), then run up to ``rounds`` rounds within
    ``max_time_s`` (at least 3). The collector is disabled while timing and restored after.
    """
    if rounds < 3:
        raise AssayError(f"measure_time rounds: expected at least 3, got {rounds}")
    resolution = _resolution_ns()
    min_round_ns = max(int(min_round_s * 1e9), 100 * resolution)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        warmup_rounds, deadline = 0, timer() + int(warmup_s * 1e9)
        while True:  # warm-up: caches, lazy init, branch predictors; not recorded
            fn()
            warmup_rounds += 1
            if timer() >= deadline:
                break
        iterations = 1
        while True:  # calibration: double calls per round until a round is long enough
            start = timer()
            for _ in range(iterations):
                fn()
            if timer() - start >= min_round_ns or iterations >= 1 << 24:
                break
            iterations *= 2
        per_call: list[float] = []
        budget_end = timer() + int(max_time_s * 1e9)
        while len(per_call) < rounds and (len(per_call) < 3 or timer() < budget_end):
            start = timer()
            for _ in range(iterations):
                fn()
            per_call.append((timer() - start) / iterations)
    finally:
        if was_enabled:
            gc.enable()
    return Timing(tuple(per_call), iterations, warmup_rounds, resolution)
