"""toystats: exact sums, medians and distinct counts, in pure Python."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["distinct", "exact_sum", "median", "naive_median", "naive_sum"]


def exact_sum(values: Iterable[float]) -> float:
    """The correctly rounded sum of ``values`` (Shewchuk's algorithm, as math.fsum)."""
    partials: list[float] = []
    for x in values:
        i = 0
        for y in partials:
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo:
                partials[i] = lo
                i += 1
            x = hi
        partials[i:] = [x]
    return math.fsum(partials) if len(partials) > 1 else (partials[0] if partials else 0.0)


def naive_sum(values: Iterable[float]) -> float:
    """Left-to-right float addition: what exact_sum exists to beat (a gate's control)."""
    total = 0.0
    for x in values:
        total += x
    return total


def median(values: Sequence[float]) -> float:
    """The median of a non-empty sequence, in O(n log n)."""
    if not values:
        raise ValueError("median of an empty sequence")
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def naive_median(values: Sequence[float]) -> float:
    """The same median in O(n^2), by counting smaller elements (a timing gate's control)."""
    n = len(values)
    ranked = sorted(range(n), key=lambda i: sum(v < values[i] for v in values))
    mid = n // 2
    picks = [values[ranked[mid]]] if n % 2 else [values[ranked[mid - 1]], values[ranked[mid]]]
    return sum(picks) / len(picks)


def distinct(values: Iterable[object]) -> list[object]:
    """The values in first-seen order, each once."""
    seen: set[object] = set()
    out = []
    for v in values:
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out
