"""The swap task: swap two words. Generated here, from a fixed seed, by our own code.

A prompt ``Input: cat river\nOutput:`` asks for `` river cat``. A LoRA fine-tune learns it in
a few hundred rows, which makes it gate-generation's quick way to a trained adapter. It was
gate-quality's task until issue 28 measured that the base model, prompted with 8 solved
examples, already scores 0.81 on it: it is learnt from the prompt format alone, so it cannot
tell a correct trainer from a broken one. gate-quality keeps it as the control of its headroom
claim and trains on :mod:`assay_testing.keyed_task`.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from assay.atomic import atomic_write_bytes

# Short, common, lower-case English nouns: each is one SmolLM2 token after a space.
_WORD_TEXT = (
    "apple bird boat bread chair cloud coin desk door drum egg farm fish flag fork frog "
    "glass goat hat horse house king lamp leaf lion map milk moon mouse nest oil owl "
    "paper pen pig rain ring river road rock rope salt sand ship shoe snow sock star "
    "stone sun table tent tree wall water wheel wind wolf"
)
WORDS = tuple(_WORD_TEXT.split())
SEED = 1919
# The adapter the gates train on this task: LoRA r8 on the attention projections of the top 10
# of SmolLM2's 30 layers, so backward stops at layer 20 (a step near 0.5 CPU-seconds).
ADAPTER = {
    "method": "lora",
    "rank": 8,
    "alpha": 16,
    "targets": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "layers": list(range(20, 30)),
}


@dataclass(frozen=True)
class Item:
    """One task item: the two words, the prompt and the one correct answer."""

    first: str
    second: str

    @property
    def prompt(self) -> str:
        return f"Input: {self.first} {self.second}\nOutput:"

    @property
    def answer(self) -> str:
        return f"{self.second} {self.first}"


@dataclass(frozen=True)
class Split:
    train: tuple[Item, ...]
    held_out: tuple[Item, ...]


def make_split(train: int = 256, held_out: int = 48, seed: int = SEED) -> Split:
    """``train`` and ``held_out`` items from ``seed``; guarantees that no held-out item shares
    its unordered word pair with a training item, and that no pair repeats."""
    rng = random.Random(seed)
    pairs = [(a, b) for a in WORDS for b in WORDS if a < b]
    rng.shuffle(pairs)
    chosen = pairs[: train + held_out]
    items = [Item(a, b) if rng.random() < 0.5 else Item(b, a) for a, b in chosen]
    return Split(tuple(items[:train]), tuple(items[train:]))


def sft_rows(items: tuple[Item, ...]) -> list[tuple[str, str]]:
    return [(item.prompt, " " + item.answer) for item in items]


def write_sft(path: Path, rows: list[tuple[str, str]]) -> Path:
    """prompt_completion JSONL, written atomically."""
    text = "".join(json.dumps({"prompt": p, "completion": c}) + "\n" for p, c in rows)
    atomic_write_bytes(path, text.encode())
    return path
