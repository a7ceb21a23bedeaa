"""Reading JSONL training rows in TRL's dataset formats and checking their shape.

Formats (the keys a row must have; other keys are ignored):

- ``text``: ``{"text": str}``
- ``prompt_completion``: ``{"prompt", "completion"}``, both strings, or both message lists
  (conversational: the prompt's messages, then the completion's assistant message(s))
- ``messages``: ``{"messages": [{"role": str, "content": str}, ...]}``
- ``preference``: ``{"prompt", "chosen", "rejected"}``, strings or message lists
- ``kto``: ``{"prompt", "completion", "label": bool}``

Every problem is a :class:`DataError` naming the file and the 1-based line number.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from assay.bounded import (
    JSONL_BYTES,
    JSONL_LINE_BYTES,
    InputTooLarge,
    lone_surrogate,
    parse_json,
    read_capped,
)
from assay.errors import AssayError

FORMATS = ("text", "prompt_completion", "messages", "preference", "kto")
# The roles a chat template renders; anything else (a typo such as "asistant") is refused
# rather than trained as an unscored or mis-rendered turn.
ROLES = ("system", "user", "assistant")


class DataError(AssayError):
    """A data file or row is malformed, too long, or scores nothing."""


@dataclass(frozen=True)
class Row:
    """One parsed JSONL row: where it came from and its JSON object."""

    line: int
    data: dict[str, Any]


@dataclass(frozen=True)
class RowFile:
    """The rows of one file, its detected format and the sha256 of its bytes."""

    path: str
    format: str
    rows: tuple[Row, ...]
    sha256: str


def detect_format(keys: set[str]) -> str | None:
    """The format a row's keys indicate, most specific first; None if none fits."""
    if "messages" in keys:
        return "messages"
    if {"prompt", "chosen", "rejected"} <= keys:
        return "preference"
    if {"prompt", "completion", "label"} <= keys:
        return "kto"
    if {"prompt", "completion"} <= keys:
        return "prompt_completion"
    if "text" in keys:
        return "text"
    return None


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(m, dict) for m in value)


def check_messages(value: Any, field: str, where: str) -> None:
    """Each item must be ``{"role": str, "content": str, ...}``; the list must not be empty."""
    if not isinstance(value, list) or not value:
        raise DataError(f"{where}: {field} must be a non-empty list of messages")
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise DataError(f"{where}: {field}[{i}] must be an object with role and content")
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                got = type(message.get(key)).__name__ if key in message else "nothing"
                raise DataError(f"{where}: {field}[{i}].{key} must be a string, got {got}")
        if message["role"] not in ROLES:
            raise DataError(
                f"{where}: {field}[{i}].role {message['role']!r} is not a known role "
                f"(expected {', '.join(ROLES)})"
            )


def _check_text_or_messages(data: dict[str, Any], fields: tuple[str, ...], where: str) -> None:
    conversational = _is_messages(data[fields[0]])
    for field in fields:
        value = data[field]
        if conversational:
            check_messages(value, field, where)
        elif not isinstance(value, str):
            raise DataError(
                f"{where}: {field} must be a string like {fields[0]}, got {type(value).__name__}"
            )


def check_row(data: dict[str, Any], fmt: str, where: str) -> None:
    """Raise DataError unless ``data`` has the fields of ``fmt`` with the right types."""
    required = {
        "text": ("text",),
        "prompt_completion": ("prompt", "completion"),
        "messages": ("messages",),
        "preference": ("prompt", "chosen", "rejected"),
        "kto": ("prompt", "completion", "label"),
    }[fmt]
    missing = [k for k in required if k not in data]
    if missing:
        raise DataError(f"{where}: {fmt} row lacks {', '.join(missing)} (has {sorted(data)})")
    if fmt == "text":
        if not isinstance(data["text"], str):
            raise DataError(f"{where}: text must be a string, got {type(data['text']).__name__}")
    elif fmt == "messages":
        check_messages(data["messages"], "messages", where)
    elif fmt == "kto":
        if not isinstance(data["label"], bool):
            raise DataError(f"{where}: label must be true or false, got {data['label']!r}")
        _check_text_or_messages(data, ("prompt", "completion"), where)
    else:
        _check_text_or_messages(data, required, where)


def read_rows(path: str | os.PathLike[str], fmt: str = "auto") -> RowFile:
    """Parse every non-blank line of a JSONL file into rows of one format.

    ``fmt`` ``auto`` takes the format from the first row's keys; every later row must then
    have that format's fields. Raises DataError (file, line) for an unreadable or empty file,
    invalid UTF-8, invalid JSON, a non-object line, or missing or wrong-typed fields.
    """
    source = os.fspath(path)
    if os.path.exists(source) and not os.path.isfile(source):  # /dev/zero, a FIFO: no end
        raise DataError(f"{source}: not a regular file; a data file must be one")
    try:
        raw = read_capped(source, JSONL_BYTES, "data file")
    except InputTooLarge as exc:
        raise DataError(str(exc)) from None
    except OSError as exc:
        raise DataError(f"{source}: cannot read data file ({exc.strerror or exc})") from exc
    rows: list[Row] = []
    chosen = None if fmt == "auto" else fmt
    for number, line in enumerate(raw.split(b"\n"), start=1):
        where = f"{source}:{number}"
        if len(line) > JSONL_LINE_BYTES:
            raise DataError(
                f"{where}: line is {len(line):,} bytes; the limit is {JSONL_LINE_BYTES:,}"
            )
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{where}: invalid UTF-8 at byte {exc.start} of the line") from exc
        if not text.strip():
            continue
        try:
            data = parse_json(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from exc
        if not isinstance(data, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(data).__name__}")
        bad = lone_surrogate(data)
        if bad is not None:
            raise DataError(f"{where}: {bad}: lone surrogate escape (\\ud800-\\udfff) is not text")
        if chosen is None:
            chosen = detect_format(set(data))
            if chosen is None:
                raise DataError(
                    f"{where}: cannot tell the row format from keys {sorted(data)} "
                    "(expected text, prompt+completion, messages, prompt+chosen+rejected, "
                    "or prompt+completion+label)"
                )
        check_row(data, chosen, where)
        rows.append(Row(number, data))
    if not rows:
        raise DataError(f"{source}: no rows (the file is empty or blank)")
    assert chosen is not None
    return RowFile(source, chosen, tuple(rows), hashlib.sha256(raw).hexdigest())
