"""xdist workers share the cores: thread counts per worker and who decides them."""

from __future__ import annotations

import pytest

from assay_testing import cores


@pytest.mark.parametrize(
    ("n_cores", "workers", "expected"), [(2, 2, 1), (16, 2, 8), (2, 4, 1), (3, 2, 1), (8, 1, 8)]
)
def test_each_worker_gets_an_equal_share_of_at_least_one(n_cores, workers, expected):
    assert cores.worker_threads(n_cores, workers) == expected


def test_outside_xdist_nothing_changes(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert cores.share_cores_among_xdist_workers() is None


def test_the_users_thread_count_wins(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cores.share_cores_among_xdist_workers() is None


def test_a_worker_sets_torch_and_its_children(monkeypatch):
    import torch

    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    for name in cores.THREAD_VARIABLES:  # set first, so that undo restores what was there
        monkeypatch.setenv(name, "0")
        monkeypatch.delenv(name)
    monkeypatch.setattr(cores, "available_cores", lambda: 4)
    before = torch.get_num_threads()
    try:
        assert cores.share_cores_among_xdist_workers() == 2
        assert torch.get_num_threads() == 2
        assert cores.os.environ["OMP_NUM_THREADS"] == "2"
        assert cores.os.environ["MKL_NUM_THREADS"] == "2"
    finally:
        torch.set_num_threads(before)
