"""The NF4 stale-gradient probe gate-cuda runs on CUDA, exercised on CPU (bitsandbytes' CPU
backend): the re-fetch protocol is exact and the recycled-slot defect is caught."""

from __future__ import annotations

import pytest

from assay_bench.slot_recycling import slot_grad_error

pytest.importorskip("bitsandbytes")


def test_refetch_protocol_matches_private_buffers():
    assert slot_grad_error("cpu", "refetch", layers=4, dim=128) == 0.0


def test_recycled_slot_views_give_wrong_gradients():
    assert slot_grad_error("cpu", "recycled", layers=4, dim=128) > 0.1


def test_protocol_and_depth_are_checked():
    with pytest.raises(ValueError, match="protocol"):
        slot_grad_error("cpu", "private")
    with pytest.raises(ValueError, match="exceed slots"):
        slot_grad_error("cpu", "recycled", layers=2, slots=2)
