"""Data: TRL row formats, masks (completion-only, multi-turn), EOS==PAD, errors, batch order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from assay.model.tokenizer import Tokenizer, load_tokenizer
from assay.train.data.dataset import (
    BatchIterator,
    Cursor,
    collate,
    dataset_fingerprint,
    load_dataset,
)
from assay.train.data.rows import DataError

CHAT = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello there"},
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4"},
]


@pytest.fixture(scope="module")
def tok(smollm2_path: Path) -> Tokenizer:
    return load_tokenizer(smollm2_path)


def _jsonl(tmp_path: Path, rows: list[Any], name: str = "d.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _scored_runs(ids: tuple[int, ...], scored: tuple[bool, ...]) -> list[list[int]]:
    runs: list[list[int]] = []
    for j, (i, s) in enumerate(zip(ids, scored, strict=True)):
        if s and (j == 0 or not scored[j - 1]):
            runs.append([])
        if s:
            runs[-1].append(i)
    return runs


def test_text_rows_score_every_token_after_the_first_including_eos(tmp_path, tok) -> None:
    ds = load_dataset(_jsonl(tmp_path, [{"text": "The cat sat."}]), tok)
    seq = ds.examples[0].seqs[0]
    assert ds.format == "text" and ds.mask == "all"
    assert seq.ids == (*tok.encode("The cat sat."), tok.eos_id)
    assert seq.scored == (False,) + (True,) * (len(seq.ids) - 1)


def test_prompt_completion_scores_only_the_completion_and_its_eos(tmp_path, tok) -> None:
    path = _jsonl(tmp_path, [{"prompt": "2 + 2 =", "completion": " 4"}])
    seq = load_dataset(path, tok).examples[0].seqs[0]
    prompt = tok.encode("2 + 2 =")
    assert seq.ids == (*prompt, *tok.encode(" 4"), tok.eos_id)
    assert _scored_runs(seq.ids, seq.scored) == [[*tok.encode(" 4"), tok.eos_id]]
    everything = load_dataset(path, tok, mask="all").examples[0].seqs[0]
    assert sum(everything.scored) == len(everything.ids) - 1


def test_multi_turn_messages_score_only_assistant_turns(tmp_path, tok) -> None:
    seq = load_dataset(_jsonl(tmp_path, [{"messages": CHAT}]), tok).examples[0].seqs[0]
    assert tok.decode(seq.ids) == tok.apply_chat_template(CHAT)
    runs = [tok.decode(r) for r in _scored_runs(seq.ids, seq.scored)]
    assert runs == ["hello there<|im_end|>\n", "4<|im_end|>\n"]


def test_conversational_prompt_completion_scores_the_assistant_reply(tmp_path, tok) -> None:
    row = {"prompt": CHAT[:1], "completion": [CHAT[1]]}
    seq = load_dataset(_jsonl(tmp_path, [row]), tok).examples[0].seqs[0]
    assert [tok.decode(r) for r in _scored_runs(seq.ids, seq.scored)] == ["hello there<|im_end|>\n"]


def test_template_without_consistent_prefixes_is_refused_for_completion_only(tmp_path, tok):
    class CountingHeader(Tokenizer):
        """A template that starts with the message count: prefixes are not prefixes."""

        def __init__(self, inner: Tokenizer) -> None:
            self.__dict__.update(inner.__dict__)

        def apply_chat_template(self, messages, add_generation_prompt=False, **extra):
            body = super().apply_chat_template(messages, add_generation_prompt, **extra)
            return f"{len(messages)} messages\n{body}"

    path = _jsonl(tmp_path, [{"messages": CHAT}])
    with pytest.raises(DataError, match=r"d\.jsonl:1: cannot locate assistant turn 1"):
        load_dataset(path, CountingHeader(tok))
    assert load_dataset(path, CountingHeader(tok), mask="all").examples[0].seqs[0].scored[1]


def test_eos_shared_with_pad_is_scored_and_padding_is_not(tmp_path, tok) -> None:
    assert tok.eos_id == tok.pad_id == 2
    path = _jsonl(tmp_path, [{"text": "a b c d e f"}, {"text": "hi"}])
    ds = load_dataset(path, tok)
    batch = collate(ds.examples, pad_id=tok.pad_id)
    short = 1
    n = int(batch.lengths[short])
    assert batch.attention_mask[short].tolist() == [1] * n + [0] * (batch.input_ids.shape[1] - n)
    # Position n-2 predicts the final EOS (id 2): scored. Padding (also id 2) is not.
    assert batch.labels[short, n - 2] == tok.eos_id and batch.loss_mask[short, n - 2]
    assert not batch.loss_mask[short, n - 1 :].any()
    assert batch.loss_mask.sum() == ds.scored_tokens
    # Control: a mask built from ids != pad_id would lose every final EOS.
    naive = torch.zeros_like(batch.loss_mask)
    naive[:, :-1] = batch.input_ids[:, 1:] != tok.pad_id
    assert int(naive.sum()) == int(batch.loss_mask.sum()) - 2


def test_labels_are_the_next_token(tmp_path, tok) -> None:
    ds = load_dataset(_jsonl(tmp_path, [{"prompt": "x", "completion": " y z"}]), tok)
    batch = collate(ds.examples, pad_id=0, pad_to=16)
    ids = list(ds.examples[0].seqs[0].ids)
    assert batch.input_ids.shape == (1, 16)
    assert batch.labels[0, : len(ids) - 1].tolist() == ids[1:]
    assert batch.loss_mask[0].tolist()[: len(ids) - 1] == list(ds.examples[0].seqs[0].scored[1:])


def test_preference_and_kto_rows(tmp_path, tok) -> None:
    pref = _jsonl(tmp_path, [{"prompt": "Q", "chosen": " yes", "rejected": " no!"}] * 2, "p.jsonl")
    ds = load_dataset(pref, tok)
    assert ds.format == "preference" and len(ds.examples[0].seqs) == 2
    batch = collate(ds.examples, pad_id=2)
    assert batch.input_ids.shape[0] == 4
    assert tok.decode(batch.input_ids[0, : batch.lengths[0]].tolist()).endswith(" yes<|im_end|>")
    assert tok.decode(batch.input_ids[2, : batch.lengths[2]].tolist()).endswith(" no!<|im_end|>")
    kto_rows = [
        {"prompt": "Q", "completion": " a", "label": True},
        {"prompt": "Q", "completion": " b", "label": False},
    ]
    kto = load_dataset(_jsonl(tmp_path, kto_rows, "k.jsonl"), tok)
    assert kto.format == "kto"
    assert collate(kto.examples, pad_id=2).kto_labels.tolist() == [True, False]


def test_row_longer_than_seq_len_names_row_and_count_unless_truncate(tmp_path, tok) -> None:
    path = _jsonl(tmp_path, [{"text": "short"}, {"text": "one two three four five six"}])
    n = len(tok.encode("one two three four five six")) + 1
    with pytest.raises(DataError, match=rf"d\.jsonl:2: {n} tokens exceed seq_len 4"):
        load_dataset(path, tok, seq_len=4)
    cut = load_dataset(path, tok, seq_len=4, truncate=True)
    assert [len(e.seqs[0].ids) for e in cut.examples] == [len(tok.encode("short")) + 1, 4]
    assert cut.examples[1].seqs[0].truncated and tok.eos_id not in cut.examples[1].seqs[0].ids
    assert cut.truncated_rows == 1


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"text": "ok"}\n{"text": "broken"\n', r"d\.jsonl:2: invalid JSON"),
        (b'{"text": "ok"}\n\n{"txt": "x"}\n', r"d\.jsonl:3: text row lacks text"),
        (b'{"text": 5}\n', r"d\.jsonl:1: text must be a string, got int"),
        (b'{"text": "ok"}\n{"text": "\xff"}\n', r"d\.jsonl:2: invalid UTF-8"),
        (b"", r"d\.jsonl: no rows"),
        (b"[1, 2]\n", r"d\.jsonl:1: expected a JSON object, got list"),
        (b'{"foo": 1}\n', r"d\.jsonl:1: cannot tell the row format"),
        (b'{"messages": [{"role": "user"}]}\n', r"d\.jsonl:1: messages\[0\]\.content must be"),
        (b'{"prompt": "a", "completion": "b", "label": "yes"}\n', r"d\.jsonl:1: label must be"),
        (
            b'{"prompt": "a", "completion": [{"role": "assistant", "content": "b"}]}\n',
            r"d\.jsonl:1: completion must be a string like prompt",
        ),
    ],
)
def test_malformed_rows_name_file_and_line(tmp_path, tok, content: bytes, expected: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(content)
    with pytest.raises(DataError, match=expected) as info:
        load_dataset(path, tok)
    assert "\n" not in str(info.value)


def test_dataset_fingerprint_covers_file_mask_and_counts(tmp_path, tok) -> None:
    path = _jsonl(tmp_path, [{"prompt": "a", "completion": " b"}])
    first = dataset_fingerprint(load_dataset(path, tok))
    assert first == dataset_fingerprint(load_dataset(path, tok))
    assert first != dataset_fingerprint(load_dataset(path, tok, mask="all"))
    path.write_text(json.dumps({"prompt": "a", "completion": " c"}) + "\n")
    assert first != dataset_fingerprint(load_dataset(path, tok))
    summary = load_dataset(path, tok).summary()
    assert summary["examples"] == 1 and summary["scored_tokens"] == 2


def test_batch_order_covers_each_epoch_and_resumes_from_a_cursor() -> None:
    state = torch.get_rng_state()
    straight = BatchIterator(10, 3, Cursor(seed=7))
    batches = [next(straight) for _ in range(8)]
    assert torch.equal(state, torch.get_rng_state())  # the global RNG is untouched
    flat = [i for b in batches for i in b]
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:20]) == list(range(10))
    assert flat[:10] != list(range(10)) and flat[:10] != flat[10:20]
    resumed_at = BatchIterator(10, 3, Cursor(seed=7))
    for _ in range(5):
        next(resumed_at)
    saved = json.loads(json.dumps(resumed_at.cursor.to_dict()))
    again = BatchIterator(10, 3, Cursor.from_dict(saved))
    assert [next(again) for _ in range(3)] == batches[5:]
    other_seed = BatchIterator(10, 3, Cursor(seed=8))
    assert [next(other_seed) for _ in range(3)] != batches[:3]
    ordered = BatchIterator(4, 3, Cursor(shuffle=False))
    assert [next(ordered) for _ in range(2)] == [[0, 1, 2], [3, 0, 1]]


def test_cursor_from_dict_rejects_bad_fields() -> None:
    with pytest.raises(ValueError):
        Cursor.from_dict({"epoch": 0, "position": 0, "seed": 0})
    with pytest.raises(ValueError):
        Cursor.from_dict({"epoch": -1, "position": 0, "seed": 0, "shuffle": True})
