"""Run every corpus case once, in a few forked processes, timing each.

The cases are independent (each has its own folder), so they split over ``workers``
processes; each worker runs its share through :func:`corpus_harness.run_case` in its main
thread (the hang guard needs it). ``ASSAY_CORPUS_WORKERS=1`` runs them in this process.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Sequence

from corpus_harness import Case, Outcome, run_case


def _timed(cases: Sequence[Case]) -> list[tuple[Outcome, float]]:
    out = []
    for case in cases:
        started = time.perf_counter()
        outcome = run_case(case)
        out.append((outcome, time.perf_counter() - started))
    return out


def run_all(cases: Sequence[Case], workers: int | None = None) -> tuple[list[Outcome], list[float]]:
    """(outcomes, seconds) in the order of ``cases``."""
    workers = workers or int(os.environ.get("ASSAY_CORPUS_WORKERS", "2"))
    if workers <= 1:
        pairs = _timed(cases)
    else:
        shares = [list(cases[i::workers]) for i in range(workers)]
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            results = pool.map(_timed, shares)
        pairs = [None] * len(cases)  # type: ignore[list-item]
        for i, share in enumerate(results):
            for j, pair in enumerate(share):
                pairs[i + j * workers] = pair
    return [p[0] for p in pairs], [p[1] for p in pairs]
