"""Datasets, padded batches with shifted labels, and a resumable deterministic batch order.

Label convention (next-token shift, done here so losses never shift): for a batch sequence
``b`` and position ``t``, ``labels[b, t] = input_ids[b, t + 1]`` and ``loss_mask[b, t]`` says
whether that target is scored. The hidden state at ``t`` is scored against ``labels[b, t]``;
the last position and every padded position have ``loss_mask`` False. ``attention_mask`` is 1
for the first ``length`` positions of each row, so padding is found from lengths, never from
``input_ids == pad_id``.
"""

from __future__ import annotations

import hashlib
import json
import os
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import torch

from assay.model.tokenizer import Tokenizer
from assay.settings import default as setting_default
from assay.train.data.masks import Example, RowEncoder, TokenSeq
from assay.train.data.rows import DataError, read_rows

SEQ_LEN: int = setting_default("data.seq_len")

__all__ = [
    "Batch",
    "BatchIterator",
    "Cursor",
    "DataError",
    "Dataset",
    "collate",
    "dataset_fingerprint",
    "load_dataset",
]


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of epoch ``epoch``'s shuffle: ``seed * 1_000_003 + epoch`` taken modulo 2**64,
    the range ``torch.Generator.manual_seed`` accepts, so every legal seed (up to 2**63 - 1)
    has an order, and every seed whose product fits keeps the order it always had."""
    return (seed * 1_000_003 + epoch) % (1 << 64)


@dataclass(frozen=True)
class Dataset:
    """Encoded examples of one JSONL file and what produced them."""

    path: str
    file_sha256: str
    format: str
    mask: str
    seq_len: int
    truncate: bool
    examples: tuple[Example, ...]

    def __len__(self) -> int:
        return len(self.examples)

    @property
    def scored_tokens(self) -> int:
        return sum(s.scored_count for e in self.examples for s in e.seqs)

    @property
    def tokens(self) -> int:
        return sum(len(s.ids) for e in self.examples for s in e.seqs)

    @property
    def truncated_rows(self) -> int:
        return sum(any(s.truncated for s in e.seqs) for e in self.examples)

    def summary(self) -> dict[str, object]:
        """JSON-ready facts: file sha256, format, mask, counts and the fingerprint."""
        return {
            "path": self.path,
            "file_sha256": self.file_sha256,
            "format": self.format,
            "mask": self.mask,
            "seq_len": self.seq_len,
            "examples": len(self),
            "tokens": self.tokens,
            "scored_tokens": self.scored_tokens,
            "truncated_rows": self.truncated_rows,
            "fingerprint": dataset_fingerprint(self),
        }


def dataset_fingerprint(dataset: Dataset) -> str:
    """sha256 over the file's sha256, format, mask, seq_len, truncate and the counts of
    examples and scored tokens: the same file read with another mask or length differs."""
    body = {
        "file_sha256": dataset.file_sha256,
        "format": dataset.format,
        "mask": dataset.mask,
        "seq_len": dataset.seq_len,
        "truncate": dataset.truncate,
        "examples": len(dataset),
        "scored_tokens": dataset.scored_tokens,
    }
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tokens_fingerprint(dataset: Dataset) -> str:
    """sha256 over every example's token ids, which of them are scored, and its label: what
    the model is trained on, so the same file under another tokenizer differs (the file's
    fingerprint alone cannot tell)."""
    digest = hashlib.sha256()
    for example in dataset.examples:
        digest.update(json.dumps([example.label, len(example.seqs)]).encode())
        for seq in example.seqs:
            digest.update(array("q", seq.ids).tobytes())
            digest.update(bytes(seq.scored))
    return digest.hexdigest()


def load_dataset(
    path: str | os.PathLike[str],
    tokenizer: Tokenizer,
    *,
    format: str = "auto",
    mask: str | None = None,
    seq_len: int = SEQ_LEN,
    truncate: bool = False,
) -> Dataset:
    """Read, validate and tokenize a JSONL file (see rows.py and masks.py for the rules).

    ``mask`` None picks ``all`` for text rows and ``completion_only`` otherwise. Raises
    DataError naming the file and line for any malformed, too-long or unscored row.
    """
    rows = read_rows(path, format)
    chosen = mask if mask is not None else ("all" if rows.format == "text" else "completion_only")
    encoder = RowEncoder(
        tokenizer,
        fmt=rows.format,
        mask=chosen,
        seq_len=seq_len,
        truncate=truncate,
        source=rows.path,
    )
    examples = tuple(encoder.encode(row) for row in rows.rows)
    return Dataset(rows.path, rows.sha256, rows.format, chosen, seq_len, truncate, examples)


@dataclass(frozen=True)
class Batch:
    """Padded tensors for ``len(lengths)`` sequences (preference: chosen rows, then rejected).

    ``kto_labels`` is set for KTO data, ``lines`` names the source rows (one per example).
    """

    input_ids: torch.Tensor  # [N, T] int64
    attention_mask: torch.Tensor  # [N, T] int64, 1 for real tokens
    labels: torch.Tensor  # [N, T] int64, target for each position (shifted)
    loss_mask: torch.Tensor  # [N, T] bool
    lengths: torch.Tensor  # [N] int64
    lines: tuple[int, ...]
    kto_labels: torch.Tensor | None = None  # [N] bool


def collate(examples: Sequence[Example], pad_id: int, pad_to: int | None = None) -> Batch:
    """Pad ``examples`` to the longest sequence (or ``pad_to``) with shifted labels.

    Preference examples contribute their chosen sequences first, then their rejected ones,
    so ``chosen = rows[:B]`` and ``rejected = rows[B:]``.
    """
    width = max(len(e.seqs) for e in examples)
    if any(len(e.seqs) != width for e in examples):
        raise ValueError("cannot mix preference and single-sequence examples in a batch")
    seqs: list[TokenSeq] = [e.seqs[k] for k in range(width) for e in examples]
    longest = max(len(s.ids) for s in seqs)
    t = longest if pad_to is None else pad_to
    if t < longest:
        raise ValueError(f"pad_to={pad_to} is shorter than the longest sequence ({longest})")
    n = len(seqs)
    input_ids = torch.full((n, t), pad_id, dtype=torch.int64)
    scored = torch.zeros((n, t), dtype=torch.bool)
    lengths = torch.tensor([len(s.ids) for s in seqs], dtype=torch.int64)
    for i, s in enumerate(seqs):
        input_ids[i, : len(s.ids)] = torch.tensor(s.ids, dtype=torch.int64)
        scored[i, : len(s.ids)] = torch.tensor(s.scored, dtype=torch.bool)
    attention = (torch.arange(t)[None, :] < lengths[:, None]).to(torch.int64)
    labels = torch.full_like(input_ids, pad_id)
    labels[:, :-1] = input_ids[:, 1:]
    loss_mask = torch.zeros_like(scored)
    loss_mask[:, :-1] = scored[:, 1:]
    kto = None
    if examples[0].label is not None:
        kto = torch.tensor([bool(e.label) for e in examples], dtype=torch.bool)
    lines = tuple(e.line for e in examples)
    return Batch(input_ids, attention, labels, loss_mask, lengths, lines, kto)


@dataclass(frozen=True)
class Cursor:
    """Where the batch order stands: the next example is ``order(epoch)[position]``."""

    epoch: int = 0
    position: int = 0
    seed: int = 0
    shuffle: bool = True

    def to_dict(self) -> dict[str, int | bool]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, int | bool]) -> Cursor:
        """Inverse of :meth:`to_dict`; ValueError for missing, extra or wrong-typed fields."""
        if set(data) != {"epoch", "position", "seed", "shuffle"}:
            raise ValueError(f"cursor fields {sorted(data)} != epoch, position, seed, shuffle")
        ints = [data[k] for k in ("epoch", "position", "seed")]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints):
            raise ValueError(f"cursor epoch/position/seed must be non-negative ints: {data}")
        if not isinstance(data["shuffle"], bool):
            raise ValueError(f"cursor shuffle must be a bool: {data}")
        return cls(**data)  # type: ignore[arg-type]


class BatchIterator:
    """Endless, deterministic micro-batches of example indices over ``size`` examples.

    Epoch ``e`` visits every index once, in ``randperm(size)`` drawn from a private generator
    seeded with ``(seed, e)`` (or in order without shuffle); the global RNGs are never
    touched. A batch that reaches the end of an epoch continues into the next, so every batch
    is full. The same cursor always yields the same following batches, which is what exact
    resume needs: save :attr:`cursor` after a step, pass it back to continue.
    """

    def __init__(self, size: int, batch_size: int, cursor: Cursor | None = None) -> None:
        if size <= 0 or batch_size <= 0:
            raise ValueError(f"size ({size}) and batch_size ({batch_size}) must be positive")
        self.size, self.batch_size = size, batch_size
        self.cursor = cursor or Cursor()
        if self.cursor.position > size:
            raise ValueError(f"cursor position {self.cursor.position} is past {size} examples")
        self._order_epoch: int | None = None
        self._order: list[int] = []

    def order(self, epoch: int) -> list[int]:
        """The visiting order of one epoch."""
        if self._order_epoch != epoch:
            if self.cursor.shuffle:
                gen = torch.Generator().manual_seed(epoch_seed(self.cursor.seed, epoch))
                self._order = torch.randperm(self.size, generator=gen).tolist()
            else:
                self._order = list(range(self.size))
            self._order_epoch = epoch
        return self._order

    def __iter__(self) -> Iterator[list[int]]:
        return self

    def __next__(self) -> list[int]:
        epoch, position = self.cursor.epoch, self.cursor.position
        picked: list[int] = []
        while len(picked) < self.batch_size:
            if position == self.size:
                epoch, position = epoch + 1, 0
            take = min(self.batch_size - len(picked), self.size - position)
            picked.extend(self.order(epoch)[position : position + take])
            position += take
        self.cursor = Cursor(epoch, position, self.cursor.seed, self.cursor.shuffle)
        return picked
