"""Sharding each step's rows by rank: union, disjointness, equal shares, global cursor."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from assay.distributed.sampler import ShardedBatches, check_divisible, chunk, rank_slice
from assay.errors import ConfigError
from assay.train.data.dataset import BatchIterator, Cursor


@given(st.lists(st.integers(0, 50), min_size=1, max_size=24), st.integers(1, 6))
def test_rank_slices_concatenate_to_the_step_in_equal_shares(rows, world):
    assume(len(rows) % world == 0)
    slices = [rank_slice(rows, r, world) for r in range(world)]
    assert [i for s in slices for i in s] == rows
    assert {len(s) for s in slices} == {len(rows) // world}


def test_rank_slices_are_disjoint_positions():
    rows = list(range(100, 112))
    slices = [set(rank_slice(rows, r, 3)) for r in range(3)]
    assert all(not (a & b) for i, a in enumerate(slices) for b in slices[i + 1 :])


def test_uneven_rows_are_a_one_line_config_error():
    with pytest.raises(ConfigError) as info:
        check_divisible(3, 2, "run.yaml: batch")
    message = str(info.value)
    assert "\n" not in message and message.startswith("run.yaml: batch:")
    assert "3 rows per step" in message and "multiple of 2" in message
    with pytest.raises(ValueError, match="outside"):
        rank_slice([1, 2], 2, 2)


def test_chunk_keeps_order_and_caps_the_size():
    assert chunk([5, 6, 7], 2) == [[5, 6], [7]]
    assert chunk([5, 6, 7, 8], 4) == [[5, 6, 7, 8]]


def test_world_size_one_draws_the_single_process_micro_batches():
    micro, accum = 2, 3
    sharded = ShardedBatches(10, micro, accum, 0, 1, Cursor(seed=4))
    single = BatchIterator(10, micro, Cursor(seed=4))
    for _ in range(5):  # past an epoch boundary
        assert sharded.next_step() == [next(single) for _ in range(accum)]
    assert sharded.cursor == single.cursor


@pytest.mark.parametrize("world", [2, 3, 6])
def test_ranks_together_draw_the_world_size_one_step(world):
    micro, accum, size = 3, 2, 7
    reference = ShardedBatches(size, micro, accum, 0, 1, Cursor(seed=9))
    ranks = [ShardedBatches(size, micro, accum, r, world, Cursor(seed=9)) for r in range(world)]
    for _ in range(6):
        expected = [i for b in reference.next_step() for i in b]
        per_rank = [rank.next_step() for rank in ranks]
        assert [i for batches in per_rank for b in batches for i in b] == expected
        assert all(len(b) <= micro for batches in per_rank for b in batches)
        assert len({len(batches) for batches in per_rank}) == 1  # same number of backward passes
        # The cursor is in global rows: every rank and world size 1 agree after each step.
        assert {rank.cursor for rank in ranks} == {reference.cursor}


def test_grad_accum_multiple_of_world_keeps_the_micro_batches_whole():
    single = ShardedBatches(16, 2, 4, 0, 1, Cursor(seed=1)).next_step()
    ranks = [ShardedBatches(16, 2, 4, r, 2, Cursor(seed=1)).next_step() for r in range(2)]
    assert ranks[0] + ranks[1] == single


def test_resuming_mid_run_at_another_world_size_continues_at_the_same_sample():
    two = [ShardedBatches(9, 2, 2, r, 2, Cursor(seed=2)) for r in range(2)]
    for _ in range(3):
        for rank in two:
            rank.next_step()
    one = ShardedBatches(9, 2, 2, 0, 1, two[0].cursor)
    following = [i for rank in two for b in rank.next_step() for i in b]
    assert [i for b in one.next_step() for i in b] == following
