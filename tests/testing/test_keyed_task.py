"""The keyed task gate-quality trains on: the split, the rows, and the few-shot prompts."""

from __future__ import annotations

import json
from collections import Counter

from assay_testing.keyed_task import (
    KEYS,
    Item,
    few_shot_prompt,
    key_ignored_rows,
    make_split,
    sft_rows,
    write_preference,
    write_sft,
)


def test_each_key_names_its_own_order():
    item = Item("red", ("cat", "sun"))
    orders = {key: Item(key, item.words).answer for key in KEYS}
    assert orders == {"red": "cat sun", "blue": "sun cat", "green": "cat cat", "gold": "sun sun"}
    assert len(set(orders.values())) == len(KEYS)
    assert all(Item(k, item.words).tempting != Item(k, item.words).answer for k in KEYS)
    assert item.prompt == "Key: red\nInput: cat sun\nOutput:"


def test_the_split_is_fixed_balanced_and_held_out_words_are_unseen_together():
    split = make_split()
    assert split == make_split() and make_split(seed=3) != split
    assert (len(split.train), len(split.held_out)) == (512, 96)
    seen = {frozenset(i.words) for i in split.train}
    assert all(frozenset(i.words) not in seen for i in split.held_out)
    everything = [*split.train, *split.held_out]
    assert len({frozenset(i.words) for i in everything}) == len(everything)
    keys = Counter(i.key for i in everything)
    assert set(keys) == set(KEYS) and max(keys.values()) - min(keys.values()) <= 1
    # shuffled after the keys were dealt in turn, so each part holds every key
    assert set(Counter(i.key for i in split.held_out)) == set(KEYS)


def test_key_ignored_rows_keep_the_format_but_not_the_key():
    items = make_split().train
    rows = key_ignored_rows(items)
    assert [p for p, _ in rows] == [p for p, _ in sft_rows(items)]
    for (_, completion), item in zip(rows, items, strict=True):
        assert completion[1:] in {item.ordered_by(k) for k in KEYS}
    agree = sum(c == " " + i.answer for (_, c), i in zip(rows, items, strict=True)) / len(items)
    assert 0.15 < agree < 0.35  # the key's own order about a quarter of the time, by chance


def test_few_shot_prompts_show_solved_training_items_and_end_with_the_question():
    split = make_split()
    item = split.held_out[0]
    prompt = few_shot_prompt(item, 3, split.train, seed=1)
    assert prompt == few_shot_prompt(item, 3, split.train, seed=1)
    assert prompt.endswith(item.prompt) and prompt.count("Key: ") == 4
    assert few_shot_prompt(item, 0, split.train, seed=1) == item.prompt
    shown = prompt[: -len(item.prompt)].split("\n\n")[:-1]
    answers = {f"{i.prompt} {i.answer}" for i in split.train}
    assert len(shown) == 3 and all(s in answers for s in shown)


def test_rows_are_written_as_jsonl(tmp_path):
    items = make_split().train[:2]
    path = write_sft(tmp_path / "s.jsonl", sft_rows(items))
    assert json.loads(path.read_text().splitlines()[0]) == {
        "prompt": items[0].prompt,
        "completion": " " + items[0].answer,
    }
    pref = write_preference(tmp_path / "p.jsonl", items, swap=True)
    row = json.loads(pref.read_text().splitlines()[0])
    assert row["chosen"] == " " + items[0].tempting and row["rejected"] == " " + items[0].answer
