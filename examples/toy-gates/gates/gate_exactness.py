"""Gate: toystats' sums are exact and its distinct() counts right, with controls that fail."""

from __future__ import annotations

import math
import random

import toystats

from assay.qualify import Threshold

SEED = 20261201


def _lists(rng: random.Random, count: int) -> list[list[float]]:
    # mixed magnitudes and signs: where left-to-right float addition loses digits
    return [
        [
            rng.choice((1e16, 1.0, -1e16, 1e-3, 3.3)) * rng.random()
            for _ in range(rng.randint(2, 60))
        ]
        for _ in range(count)
    ]


def _worst_error(summer, lists: list[list[float]]) -> float:
    return max(abs(summer(xs) - math.fsum(xs)) for xs in lists)


def test_sum_is_exact(gate):
    gate.seed(SEED)
    lists = _lists(random.Random(SEED), 400)
    claim = gate.claim(
        "exact-sum",
        "exact_sum equals the correctly rounded sum (math.fsum) on 400 mixed-magnitude lists",
        kind="correctness",
        threshold=Threshold("==", 0.0),
        unit="max abs error",
        code=["toystats"],
    )
    claim.measure(_worst_error(toystats.exact_sum, lists))
    # the control: the same check on plain left-to-right addition must miss the threshold
    claim.control("naive left-to-right sum", _worst_error(toystats.naive_sum, lists))
    gate.not_tested("NaN and infinity inputs", "math.fsum raises or propagates them; not a claim")


def _miscounted(distinct, lists: list[list[int]]) -> int:
    return sum(len(distinct(xs)) != len(set(xs)) for xs in lists)


def test_distinct_counts(gate):
    gate.seed(SEED + 1)
    rng = random.Random(SEED + 1)
    lists = [[rng.randint(0, 9) for _ in range(rng.randint(0, 30))] for _ in range(300)]
    claim = gate.claim(
        "distinct-count",
        "distinct() returns exactly as many items as there are distinct values (300 lists)",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="lists miscounted",
        code=["toystats"],
    )
    claim.measure(_miscounted(toystats.distinct, lists))
    claim.control(
        "drops the last distinct value", _miscounted(lambda xs: toystats.distinct(xs)[:-1], lists)
    )
