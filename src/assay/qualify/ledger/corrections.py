"""A rewrite of receipt history (``Violation``) and its dated acknowledgement (``Correction``),
read from ``<receipts>/<gate>/CORRECTIONS``; the file's format is described in
:mod:`assay.qualify.ledger.history`, which finds the violations."""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from assay.bounded import parse_json, read_text_refusing, split_lines

CORRECTIONS = "CORRECTIONS"
CHANGES = ("deleted", "modified", "line removed", "line changed", "line inserted")
WORKING_TREE = "working tree"
_HEX = re.compile(r"^[0-9a-f]+$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_REQUIRED = ("date", "commit", "file", "change", "sha256", "reason")


@dataclass(frozen=True)
class Violation:
    """One rewrite of history: ``file`` in ``gate`` changed by ``commit`` (40 hex, or
    :data:`WORKING_TREE`); ``sha256`` is that of the earlier version's bytes."""

    gate: str
    file: str
    commit: str
    change: str
    sha256: str
    detail: str = ""
    earlier: bytes = field(default=b"", repr=False, compare=False)  # a receipt's earlier bytes

    def describe(self) -> str:
        """One line naming the gate, the file, the commit (12 hex) and what happened."""
        where = (
            "in the working tree (uncommitted)"
            if self.commit == WORKING_TREE
            else f"in commit {self.commit[:12]}"
        )
        detail = f": {self.detail}" if self.detail else ""
        return (
            f"{self.gate}/{self.file}: {self.change} {where} "
            f"(earlier version sha256 {self.sha256}){detail}"
        )


@dataclass(frozen=True)
class Correction:
    """One acknowledgement line of ``<gate>/CORRECTIONS`` (``line`` is its 1-based number)."""

    gate: str
    line: int
    date: str
    commit: str
    file: str
    change: str
    sha256: str
    reason: str
    content: str | None = None  # the earlier version's text, for a receipt deleted or modified

    @property
    def erases_receipt(self) -> bool:
        """True when the entry acknowledges a receipt deleted or modified: evidence erased,
        which the standing must still weigh (its ``content`` carries it)."""
        return self.change in ("deleted", "modified") and self.file.endswith(".json")

    def covers(self, v: Violation) -> bool:
        """True only for the violation this entry names: same gate, file, change, earlier
        sha256 and commit (the entry's hex a prefix of it); never an uncommitted one, never a
        rewrite of CORRECTIONS."""
        return (
            v.commit != WORKING_TREE
            and v.file != CORRECTIONS
            and (v.gate, v.file, v.change, v.sha256)
            == (self.gate, self.file, self.change, self.sha256)
            and v.commit.startswith(self.commit)
        )


def _entry(gate: str, number: int, text: str) -> Correction | str:
    """A Correction, or why the line is not one."""
    try:
        data: Any = parse_json(text)
    except json.JSONDecodeError as err:
        return f"not JSON ({err})"
    if not isinstance(data, dict):
        return "not a JSON object"
    missing = [k for k in _REQUIRED if not isinstance(data.get(k), str) or not data[k].strip()]
    if missing:
        return f"missing or empty: {', '.join(missing)}"
    try:
        datetime.date.fromisoformat(data["date"] if _DATE.match(data["date"]) else "")
    except ValueError:
        return f"date {data['date']!r} is not a calendar date YYYY-MM-DD"
    if not (_HEX.match(data["commit"]) and 12 <= len(data["commit"]) <= 40):
        return "commit must be 12 to 40 lowercase hex digits"
    if not (_HEX.match(data["sha256"]) and len(data["sha256"]) == 64):
        return "sha256 must be 64 lowercase hex digits"
    if data["change"] not in CHANGES:
        return f"change {data['change']!r} is not one of {', '.join(CHANGES)}"
    content = data.get("content")
    if content is not None:
        if not isinstance(content, str):
            return "content must be the earlier version's text, as a string"
        if hashlib.sha256(content.encode("utf-8")).hexdigest() != data["sha256"]:
            return "content does not hash to sha256: it is not the earlier version"
    # the six strings checked above, in field order: mypy cannot count a generator's items
    fields = cast("tuple[str, str, str, str, str, str]", (data[k] for k in _REQUIRED))
    return Correction(gate, number, *fields, content=content)


def read_corrections(receipts_dir: Path, gate: str) -> tuple[list[Correction], list[str]]:
    """The entries of ``<gate>/CORRECTIONS`` (none if absent) and one problem per bad line."""
    path = Path(receipts_dir) / gate / CORRECTIONS
    if not path.exists() and not path.is_symlink():
        return [], []
    try:
        lines = split_lines(read_text_refusing(path, within=path.parent))
    except (OSError, UnicodeDecodeError) as err:
        return [], [f"{gate}/{CORRECTIONS}: not readable ({err})"]
    found: list[Correction] = []
    problems: list[str] = []
    for number, text in enumerate(lines, 1):
        if not text.strip() or text.startswith("#"):
            continue
        entry = _entry(gate, number, text)
        if isinstance(entry, str):
            problems.append(f"{gate}/{CORRECTIONS}:{number}: {entry}")
        else:
            found.append(entry)
    return found, problems
