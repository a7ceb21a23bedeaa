"""Rows to token ids and scored-token masks.

Conventions (the loss and the batch builder rely on them):

- A sequence is ``ids`` plus ``scored``, one flag per token: ``scored[j]`` means token ``j`` is
  a prediction target, predicted from tokens ``< j``. ``scored[0]`` is always False (nothing
  predicts the first token). Masks come from text spans and lengths, never from comparing
  ids with the pad id, so an EOS that shares the pad id (SmolLM2: both 2) is still scored.
- Plain strings (text, prompt/completion, preference, kto): BOS is prepended when the
  tokenizer's file asks for it, and EOS is appended to what the model should learn to end.
  Prompt and completion are tokenized separately and concatenated, so the mask boundary is
  a token boundary.
- Conversations go through the model's own chat template; nothing is added (the template
  writes its own turn terminators). The rendered text is tokenized once, as transformers'
  ``apply_chat_template(tokenize=True)`` does (tokenizing span by span would put a word-start
  marker such as SentencePiece's ``▁`` at every span). Each assistant turn's character span is
  found by rendering prefixes (``messages[:i]`` with the generation prompt, then
  ``messages[:i+1]``); a token is the turn's when its characters overlap the span, as
  transformers' ``return_assistant_tokens_mask`` counts them.
- ``completion_only`` scores completions (for messages: every assistant turn, including its
  terminator); ``all`` scores every token after the first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from assay.model.tokenizer import Tokenizer
from assay.train.data.rows import DataError, Row

MASKS = ("all", "completion_only")


@dataclass(frozen=True)
class TokenSeq:
    """Token ids and, per token, whether it is scored (see the module's conventions)."""

    ids: tuple[int, ...]
    scored: tuple[bool, ...]
    truncated: bool = False

    @property
    def scored_count(self) -> int:
        return sum(self.scored)


@dataclass(frozen=True)
class Example:
    """One row as sequences: one for SFT and KTO, two (chosen, rejected) for preference."""

    line: int
    seqs: tuple[TokenSeq, ...]
    label: bool | None = None


Segments = list[tuple[list[int], bool]]


class RowEncoder:
    """Turns validated rows of one format into :class:`Example` objects.

    Guarantees: every sequence has at most ``seq_len`` tokens and at least one scored token;
    otherwise DataError naming ``source``, the row's line and its token count (rows are cut
    to ``seq_len`` instead when ``truncate``).
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        fmt: str,
        mask: str,
        seq_len: int,
        truncate: bool,
        source: str,
    ) -> None:
        if mask not in MASKS:
            raise DataError(f"{source}: mask {mask!r} is not one of {', '.join(MASKS)}")
        if fmt == "text" and mask == "completion_only":
            raise DataError(f"{source}: completion_only needs completions; text rows have none")
        self.tok, self.fmt, self.mask = tokenizer, fmt, mask
        self.seq_len, self.truncate, self.source = seq_len, truncate, source
        summary = tokenizer.summary()
        self._bos = [tokenizer.bos_id] if summary["add_bos_token"] and tokenizer.bos_id else []
        self._eos = [tokenizer.eos_id] if tokenizer.eos_id is not None else []

    # public -------------------------------------------------------------------------------
    def encode(self, row: Row) -> Example:
        where = f"{self.source}:{row.line}"
        data = row.data
        if self.fmt == "text":
            ids = self.tok.encode(data["text"], add_special_tokens=True)
            if not self._adds_eos():  # else the file's flag appended it
                ids = ids + self._eos
            return Example(row.line, (self._finish([(ids, True)], where),))
        if self.fmt == "messages":
            return Example(
                row.line, (self._finish(self._conversation(data["messages"], where), where),)
            )
        if self.fmt == "preference":
            chosen = self._finish(
                self._pair(data["prompt"], data["chosen"], where), where, "chosen"
            )
            rejected = self._finish(
                self._pair(data["prompt"], data["rejected"], where), where, "rejected"
            )
            return Example(row.line, (chosen, rejected))
        seq = self._finish(self._pair(data["prompt"], data["completion"], where), where)
        return Example(row.line, (seq,), data["label"] if self.fmt == "kto" else None)

    # pieces -------------------------------------------------------------------------------
    def _adds_eos(self) -> bool:
        return bool(self.tok.summary()["add_eos_token"])

    def _render(self, messages: Sequence[dict[str, Any]], where: str, gen: bool = False) -> str:
        try:
            return self.tok.apply_chat_template(list(messages), add_generation_prompt=gen)
        except ValueError as exc:  # the template's raise_exception
            raise DataError(f"{where}: the chat template refused the row ({exc})") from exc

    def _pair(self, prompt: Any, completion: Any, where: str) -> Segments:
        """Prompt (unscored) then completion (scored), as strings or as messages."""
        if isinstance(prompt, str):
            return [
                (self._bos + self.tok.encode(prompt), False),
                (self.tok.encode(completion) + self._eos, True),
            ]
        head = self._render(prompt, where, gen=True)
        full = self._render([*prompt, *completion], where)
        if not full.startswith(head):
            raise DataError(
                f"{where}: the chat template's rendering of the prompt with a generation "
                "prompt is not a prefix of prompt + completion; cannot locate the completion"
            )
        return [(self.tok.encode(head), False), (self.tok.encode(full[len(head) :]), True)]

    def _assistant_spans(
        self, messages: list[dict[str, Any]], full: str, where: str
    ) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            head = self._render(messages[:i], where, gen=True)
            end_text = self._render(messages[: i + 1], where)
            start = len(head)
            ok = full.startswith(head) and full.startswith(end_text) and len(end_text) > start
            if not ok or start < (spans[-1][1] if spans else 0):
                raise DataError(
                    f"{where}: cannot locate assistant turn {i}: the chat template does not "
                    "render conversation prefixes as prefixes of the whole"
                )
            spans.append((start, len(end_text)))
        return spans

    def _conversation(self, messages: list[dict[str, Any]], where: str) -> Segments:
        full = self._render(messages, where)
        try:
            spans = self._assistant_spans(messages, full, where)
        except DataError:
            if self.mask == "completion_only":
                raise
            return [(self.tok.encode(full), True)]  # ``all`` needs no spans
        ids, offsets = self.tok.encode_with_offsets(full)
        segments: Segments = []
        for token, (first, last) in zip(ids, offsets, strict=True):
            mine = any(first < end and last > start for start, end in spans)
            if segments and segments[-1][1] == mine:
                segments[-1][0].append(token)
            else:
                segments.append(([token], mine))
        return segments

    def _finish(self, segments: Segments, where: str, part: str = "") -> TokenSeq:
        ids: list[int] = []
        scored: list[bool] = []
        for piece, is_completion in segments:
            ids.extend(piece)
            scored.extend([is_completion or self.mask == "all"] * len(piece))
        if scored:
            scored[0] = False
        label = f" ({part})" if part else ""
        truncated = False
        if len(ids) > self.seq_len:
            if not self.truncate:
                raise DataError(
                    f"{where}{label}: {len(ids)} tokens exceed seq_len {self.seq_len} "
                    "(raise data.seq_len or set data.truncate: true to cut)"
                )
            ids, scored, truncated = ids[: self.seq_len], scored[: self.seq_len], True
        if not any(scored):
            why = " after truncation" if truncated else ""
            raise DataError(f"{where}{label}: no scored tokens{why} ({len(ids)} tokens)")
        return TokenSeq(tuple(ids), tuple(scored), truncated)
