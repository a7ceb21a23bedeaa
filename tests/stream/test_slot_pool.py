"""The slot pool on its own, over a store that writes each layer's number into its bytes:
which slot a prefetch takes (least recently used, never one in use), that a layer already held
or on its way is not fetched twice, and the refusals."""

from __future__ import annotations

import pytest
import torch

from assay.errors import AssayError
from assay.stream.layout import LayerLayout
from assay.stream.pool import SlotPool, StreamError

LAYERS = 4


class NumberStore:
    """Layer i's block: every byte equal to i."""

    def __init__(self) -> None:
        self.reads: list[int] = []

    def read_into(self, layer: int, buffer: torch.Tensor, non_blocking: bool) -> None:
        self.reads.append(layer)
        buffer.fill_(layer)


def _pool(buffers: int = 2) -> tuple[SlotPool, NumberStore]:
    """Layers of 64, 128, ... bytes, so a slot must fit the largest."""
    blocks = [torch.zeros(64 * (i + 1), dtype=torch.uint8) for i in range(LAYERS)]
    layouts = [LayerLayout.of({"w": block}) for block in blocks]
    store = NumberStore()
    return SlotPool(store, layouts, buffers, torch.device("cpu")), store


def test_slots_fit_the_largest_layer_and_use_yields_its_bytes():
    pool, store = _pool()
    assert pool.slot_bytes == 64 * LAYERS and pool.device_bytes == 2 * pool.slot_bytes
    for layer in range(LAYERS):
        with pool.use(layer, layer + 1 if layer + 1 < LAYERS else None) as views:
            assert views["w"].tolist() == [layer] * (64 * (layer + 1))
    assert store.reads == list(range(LAYERS)) and pool.fetches == LAYERS


def test_a_layer_held_or_on_its_way_is_not_fetched_again():
    pool, store = _pool()
    first = pool.prefetch(1)
    assert pool.prefetch(1) is first
    with pool.use(1):
        pass
    assert store.reads == [1] and pool.fetches == 1


def test_the_least_recently_used_free_slot_is_taken():
    pool, _ = _pool(buffers=3)
    for layer in (0, 1, 2):
        with pool.use(layer):
            pass
    with pool.use(0):  # layer 0 used again: layer 1's slot is now the oldest
        pass
    assert pool.prefetch(3).requested == 3
    assert sorted(s.requested for s in pool.slots) == [0, 2, 3]


def test_a_slot_in_use_is_never_taken_and_a_full_pool_is_refused():
    pool, _ = _pool(buffers=2)
    full = r"every stream slot is in use; increase stream\.buffers"
    with pool.use(0), pool.use(1), pytest.raises(StreamError, match=full):
        pool.prefetch(2)


def test_fewer_than_two_buffers_and_copy_engines_on_cuda_are_refused():
    with pytest.raises(AssayError, match=r"stream\.buffers must be at least 2, got 1"):
        _pool(buffers=1)
    pool, _ = _pool()
    pool.cuda = True  # as a CUDA pool would be: its copies go through a copy stream
    with pytest.raises(AssayError, match="a copy engine replaces CPU copies only"):
        pool.set_copy_engine(object())


def test_a_slot_asked_for_a_layer_it_does_not_hold_says_so():
    pool, _ = _pool()
    with pool.use(0):
        pass
    with pytest.raises(StreamError, match="no stream slot holds layer 3"):
        pool.buffer(3)
    assert pool.buffer(0).tolist()[:4] == [0, 0, 0, 0]
