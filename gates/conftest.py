"""Gate-wide pytest setup: xdist workers share the cores instead of oversubscribing them."""

from __future__ import annotations

from assay.testing.cores import share_cores_among_xdist_workers


def pytest_configure(config) -> None:
    share_cores_among_xdist_workers()
