"""One share of the CPU cores per pytest-xdist worker, for the worker and what it starts.

``pytest -n 2`` on a 2-core machine runs two workers, and torch gives each one an intra-op
pool of one thread per core, as it does for every training process a gate starts. Four busy
threads on two cores make OpenMP spin at its barriers: measured on 2 shared cores, one
`assay train` of SmolLM2 took 40 s of CPU with 2 threads against 7 s with 1. Giving each worker
cores // workers threads (exported as OMP_NUM_THREADS / MKL_NUM_THREADS, so subprocesses
inherit it) removes that waste; an explicit OMP_NUM_THREADS from the user always wins.
"""

from __future__ import annotations

import os

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def available_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def worker_threads(cores: int, workers: int) -> int:
    """Threads per worker when ``workers`` share ``cores``: an equal share, at least one."""
    return max(1, cores // max(1, workers))


def share_cores_among_xdist_workers() -> int | None:
    """In an xdist worker with no OMP_NUM_THREADS set by the user, set torch's thread count
    and the thread variables to this worker's share of the cores; return that count. Outside
    xdist, or when the user chose, change nothing and return None."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers is None or os.environ.get("OMP_NUM_THREADS"):
        return None
    threads = worker_threads(available_cores(), int(workers))
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, str(threads))
    import torch

    torch.set_num_threads(threads)
    return threads
