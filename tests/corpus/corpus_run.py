"""Run every corpus case once, timing each.

By default (``ASSAY_CORPUS_WORKERS=1``) the cases run in this process, each through
:func:`corpus_harness.run_case` in the main thread (the hang guard needs it): after the first
case has paid for the imports, a case that loads the tiny model costs a fraction of a second,
which a spawned worker would pay again. More workers (spawned: torch is not fork-safe once its
threads run) help only on an idle multi-core machine.
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
    workers = workers or int(os.environ.get("ASSAY_CORPUS_WORKERS", "1"))
    if workers <= 1:
        pairs = _timed(cases)
    else:
        shares = [list(cases[i::workers]) for i in range(workers)]
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            results = pool.map(_timed, shares)
        pairs = [None] * len(cases)  # type: ignore[list-item]
        for i, share in enumerate(results):
            for j, pair in enumerate(share):
                pairs[i + j * workers] = pair
    return [p[0] for p in pairs], [p[1] for p in pairs]
