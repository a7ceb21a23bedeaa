"""gate-quality's task with headroom: order two words by a hidden per-key rule.

A prompt ``Key: blue\nInput: cat sun\nOutput:`` asks for `` sun cat``: each of four keys
names one fixed order of the two words (``red`` keeps them, ``blue`` swaps them, ``green``
repeats the first, ``gold`` the second). Nothing in the prompt says which order a key means, so
a prompted base model can copy the input (right for the ``red`` quarter) and otherwise has to
guess; a few shots drawn from the training rows show each key about twice, mixed with the other
three, which a 135M model does not untangle. A fine-tune that learns only the output format (two
input words, some key's order) scores about a quarter; only learning the key-to-order map
reaches the top. Held-out items use word pairs whose unordered set never occurs in training, so
rows cannot be memorised.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from assay.atomic import atomic_write_bytes
from assay_testing.swap_task import WORDS

SEED = 2026
# key -> the input positions the output takes, in order; each key is one SmolLM2 token
KEYS: dict[str, tuple[int, ...]] = {
    "red": (0, 1),
    "blue": (1, 0),
    "green": (0, 0),
    "gold": (1, 1),
}
WIDTH = 2


@dataclass(frozen=True)
class Item:
    """One task item: the key, the two input words, and the one correct answer."""

    key: str
    words: tuple[str, ...]

    @property
    def prompt(self) -> str:
        return f"Key: {self.key}\nInput: {' '.join(self.words)}\nOutput:"

    def ordered_by(self, key: str) -> str:
        """The input words in the order ``key`` prescribes."""
        return " ".join(self.words[i] for i in KEYS[key])

    @property
    def answer(self) -> str:
        return self.ordered_by(self.key)

    @property
    def tempting(self) -> str:
        """The most tempting wrong answer: the order of the next key (the copy for ``gold``)."""
        keys = list(KEYS)
        return self.ordered_by(keys[(keys.index(self.key) + 1) % len(keys)])

    def shown(self) -> str:
        """The item as a solved example inside a few-shot prompt."""
        return f"{self.prompt} {self.answer}\n\n"


@dataclass(frozen=True)
class Split:
    train: tuple[Item, ...]
    held_out: tuple[Item, ...]


def make_split(train: int = 512, held_out: int = 96, seed: int = SEED) -> Split:
    """``train`` and ``held_out`` items, the keys in turn (so each key has a quarter of each
    part); guarantees that no unordered word pair occurs twice anywhere, so no held-out
    item's words were seen together in training."""
    rng = random.Random(seed)
    seen: set[frozenset[str]] = set()
    items: list[Item] = []
    keys = list(KEYS)
    while len(items) < train + held_out:
        words = tuple(rng.sample(WORDS, WIDTH))
        if frozenset(words) in seen:
            continue
        seen.add(frozenset(words))
        items.append(Item(keys[len(items) % len(keys)], words))  # type: ignore[arg-type]
    rng.shuffle(items)
    return Split(tuple(items[:train]), tuple(items[train:]))


def few_shot_prompt(item: Item, shots: int, pool: tuple[Item, ...], seed: int) -> str:
    """``item``'s prompt after ``shots`` solved training items drawn at random from ``pool``
    (the same draw for the same ``seed`` and item)."""
    rng = random.Random(f"{seed}:{item.prompt}")
    return "".join(example.shown() for example in rng.sample(pool, shots)) + item.prompt


def sft_rows(items: tuple[Item, ...]) -> list[tuple[str, str]]:
    return [(item.prompt, " " + item.answer) for item in items]


def key_ignored_rows(items: tuple[Item, ...], seed: int = SEED) -> list[tuple[str, str]]:
    """(prompt, completion) rows whose completions order the words by a key drawn at random
    per row: the format is kept (two input words, a key's order) but the key says nothing, so
    a model trained on them can learn only the format."""
    rng = random.Random(seed + 1)
    return [(item.prompt, " " + item.ordered_by(rng.choice(list(KEYS)))) for item in items]


def write_sft(path: Path, rows: list[tuple[str, str]]) -> Path:
    """prompt_completion JSONL, written atomically."""
    text = "".join(json.dumps({"prompt": p, "completion": c}) + "\n" for p, c in rows)
    atomic_write_bytes(path, text.encode())
    return path


def write_preference(path: Path, items: tuple[Item, ...], *, swap: bool = False) -> Path:
    """preference JSONL: chosen = the key's order, rejected = the next key's (``swap`` flips
    them)."""
    lines = []
    for item in items:
        chosen, rejected = " " + item.answer, " " + item.tempting
        if swap:
            chosen, rejected = rejected, chosen
        lines.append(json.dumps({"prompt": item.prompt, "chosen": chosen, "rejected": rejected}))
    atomic_write_bytes(path, "".join(f"{line}\n" for line in lines).encode())
    return path
