"""A conversation row is tokenized as transformers tokenizes the rendered chat: once, whole
(issue 51). Span by span, a SentencePiece-style tokenizer (Metaspace, byte fallback) puts a
word-start marker at every span, so the ids a run trained on were ids no chat ever produces.
The scored tokens are those whose characters overlap an assistant turn, computed again here
from transformers' own rendering and offsets."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assay.model.tokenizer import load_tokenizer
from assay.train.data.dataset import load_dataset
from assay_testing.hf_tokenizers import save_byte_fallback_folder

WORDS = st.sampled_from(
    ["The", "quick", "fox", "0123", "words", "lines", "é", "中文", "  spaced", "x!", "\n"]
)
TEXT = st.lists(WORDS, min_size=1, max_size=6).map(" ".join).filter(lambda t: t.strip())


@st.composite
def conversations(draw):
    turns = draw(st.integers(min_value=1, max_value=3))
    messages = []
    for _ in range(turns):
        messages.append({"role": "user", "content": draw(TEXT)})
        messages.append({"role": "assistant", "content": draw(TEXT)})
    return messages


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return save_byte_fallback_folder(tmp_path_factory.mktemp("metaspace") / "tok")


def expected(folder: Path, messages: list[dict]) -> tuple[list[int], list[bool]]:
    """transformers' ids of the rendered chat, and which tokens overlap an assistant turn
    (turn spans from rendering prefixes, token spans from transformers' offsets)."""
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(folder)
    full = theirs.apply_chat_template(messages, tokenize=False)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            head = theirs.apply_chat_template(
                messages[:i], tokenize=False, add_generation_prompt=True
            )
            end = theirs.apply_chat_template(messages[: i + 1], tokenize=False)
            spans.append((len(head), len(end)))
    encoded = theirs(full, add_special_tokens=False, return_offsets_mapping=True)
    mask = [any(a < e and b > s for s, e in spans) for a, b in encoded["offset_mapping"]]
    return list(encoded["input_ids"]), mask


def ours(folder: Path, tmp_path: Path, messages: list[dict]) -> tuple[list[int], list[bool]]:
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"messages": messages}) + "\n")
    seq = load_dataset(path, load_tokenizer(folder), seq_len=4096).examples[0].seqs[0]
    return list(seq.ids), list(seq.scored)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(messages=conversations())
def test_a_conversation_is_the_ids_transformers_gives_its_rendered_chat(folder, tmp_path, messages):
    ids, scored = ours(folder, tmp_path, messages)
    want_ids, want_mask = expected(folder, messages)
    assert ids == want_ids
    assert scored[1:] == want_mask[1:]  # nothing predicts the first token


def test_span_by_span_would_differ_here(folder):
    """The control: encoding the rendered chat span by span at the assistant turns' edges
    (what the rows were before) gives other ids for this tokenizer, so the property above can
    fail: the user turn after an assistant turn gains a word-start marker."""
    from transformers import AutoTokenizer

    messages = [
        {"role": "user", "content": "The fox"},
        {"role": "assistant", "content": "words"},
        {"role": "user", "content": "lines"},
        {"role": "assistant", "content": "0123"},
    ]
    theirs = AutoTokenizer.from_pretrained(folder)
    full = theirs.apply_chat_template(messages, tokenize=False)
    edges = [0]
    for i in (1, 3):
        head = theirs.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True)
        edges += [len(head), len(theirs.apply_chat_template(messages[: i + 1], tokenize=False))]
    edges.append(len(full))
    tok = load_tokenizer(folder)
    pieces = [t for a, b in itertools.pairwise(edges) for t in tok.encode(full[a:b])]
    assert pieces != tok.encode(full) == expected(folder, messages)[0]
