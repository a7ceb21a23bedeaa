"""The exact-match grader and the swap task gate-generation trains on."""

from __future__ import annotations

import json

import pytest

from assay_testing import defects, grader
from assay_testing.swap_task import make_split, sft_rows, write_sft


@pytest.mark.parametrize(
    "answer", [" river cat", "River Cat.", "river  cat!", "'river cat'", "river cat\nInput: a b"]
)
def test_formatting_variants_are_accepted(answer):
    assert grader.exact_match(answer, "river cat")


@pytest.mark.parametrize(
    "answer", ["cat river", "river", "river cat cat", "rivercat", "", "I can't help with that."]
)
def test_near_misses_and_refusals_are_rejected(answer):
    assert not grader.exact_match(answer, "river cat")


def test_score_is_a_fraction_and_checks_lengths():
    assert grader.score(["a b", "x"], ["a b", "c d"]) == 0.5
    assert grader.score([], []) == 0.0
    with pytest.raises(ValueError, match="1 answers for 2 items"):
        grader.score(["a"], ["a", "b"])


def test_fault_points_break_the_grader_the_way_they_say():
    with defects.inject("testing.grader.prefix_match"):
        assert grader.exact_match("", "river cat")
    with defects.inject("testing.grader.raw_compare"):
        assert not grader.exact_match(" river cat", "river cat")


def test_the_split_is_fixed_and_held_out_pairs_are_unseen():
    split = make_split()
    assert split == make_split()
    seen = {frozenset((i.first, i.second)) for i in split.train}
    assert all(frozenset((i.first, i.second)) not in seen for i in split.held_out)
    assert len(split.train) == 256 and len(split.held_out) == 48
    assert make_split(seed=2) != split


def test_sft_rows_are_written_as_jsonl(tmp_path):
    items = make_split().train
    path = write_sft(tmp_path / "s.jsonl", sft_rows(items))
    row = json.loads(path.read_text().splitlines()[0])
    assert row == {"prompt": items[0].prompt, "completion": " " + items[0].answer}
