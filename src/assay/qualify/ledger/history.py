"""The receipts folder checked against its git history: append-only means append-only.

:mod:`assay.qualify.ledger.chain` checks the receipts *as they are now*; it cannot see a receipt
deleted together with its ledger line, or a ledger rewritten from scratch. This module walks
the git history of ``<receipts>/<gate>/`` (one ``git log`` for the whole folder) and reports:

* a ``LEDGER`` (or ``CORRECTIONS``) version that is not an extension of the version before it:
  a line removed, changed, or inserted above existing lines;
* any other file of a gate folder (a receipt) deleted, or modified after it was added;
* the same, uncommitted: the working tree against ``HEAD``.

A merge is compared with its first parent; commits on merged branches are compared with their
own parents. Without a git repository, in a shallow clone, or for receipts never committed,
the history is *not checked*: the report says so and why (a note, neither a pass nor a failure).

Acknowledging a violation. History cannot be rewritten, so a past violation is acknowledged,
dated, in ``<receipts>/<gate>/CORRECTIONS``: an append-only file (its own history is checked
like a LEDGER's), ``#`` lines are comments, every other line is one JSON object::

    {"date": "2026-12-02", "commit": "<12 to 40 hex>", "file": "<name in the gate folder>",
     "change": "deleted", "sha256": "<64 hex>", "reason": "<what it said, and why>"}

``change`` is one of :data:`CHANGES`, exactly as the problem line states it; ``sha256`` is the
sha256 of the bytes of the *earlier* version (the receipt that was deleted or modified, the
LEDGER before it was rewritten), so one entry covers exactly one violation. An entry for a
receipt deleted or modified carries ``content``, the earlier version's text (its sha256 is
``sha256``): an acknowledgement explains an erasure but never erases the evidence, so every view
still weighs the receipt it removed (:mod:`assay.qualify.judging.evidence`); an entry without it
leaves the gate short of a plain pass. Further keys are kept as information (for example
``receipt_sha256``, ``status``, ``numbers``). A covered
violation is reported as a note citing the entry; an entry that covers nothing in the history
is a problem. Uncommitted changes and rewrites of ``CORRECTIONS`` itself cannot be
acknowledged: restore the file instead.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path

from assay.bounded import split_lines
from assay.qualify.core.git import GitFailed, run_git
from assay.qualify.core.status import derive_status
from assay.qualify.ledger.chain import LEDGER
from assay.qualify.ledger.corrections import (
    CHANGES,
    CORRECTIONS,
    WORKING_TREE,
    Correction,
    Violation,
    read_corrections,
)

__all__ = [
    "CHANGES",
    "CORRECTIONS_HEADER",
    "HistoryReport",
    "check_history",
    "gate_history",
    "read_corrections",
    "rewrite",
]

APPEND_ONLY = frozenset({LEDGER, CORRECTIONS})
CORRECTIONS_HEADER = (
    "# assay corrections v1: one JSON object per line, append-only; "
    "format in assay.qualify.ledger.history\n"
)
_NULL_SHA = "0" * 40


@dataclass(frozen=True)
class HistoryReport:
    """What the history walk found. ``checked`` is False when it could not walk (``reason``
    says why, and ``notes`` carries "history not checked: <reason>"); ``problems`` are
    unacknowledged violations and bad or unmatched CORRECTIONS lines; ``notes`` also cite each
    acknowledged violation. ``violations`` lists every violation found, acknowledged or not."""

    checked: bool
    reason: str
    problems: tuple[str, ...]
    notes: tuple[str, ...]
    violations: tuple[Violation, ...]

    @property
    def failed(self) -> bool:
        """True when there is something to fix (a not-checked history is not a failure)."""
        return bool(self.problems)

    def problems_for(self, gate: str) -> list[str]:
        """The problems of one gate folder (each names ``<gate>/<file>`` first)."""
        return [p for p in self.problems if p.startswith(f"{gate}/")]


class _NotChecked(Exception):
    """The history cannot be walked; the message is the reason."""


@dataclass(frozen=True)
class _Change:
    commit: str
    status: str
    gate: str
    file: str
    old: str
    new: str


def _git(top: Path, *args: str, stdin: bytes | None = None) -> bytes:
    """git's stdout, paths unquoted; _NotChecked (with the reason) when git is missing, slow or
    fails."""
    try:
        return run_git(top, *args, stdin=stdin, config=("core.quotepath=off",))
    except GitFailed as err:
        raise _NotChecked(str(err)) from err


def _locate(receipts_dir: Path) -> tuple[Path, str]:
    """The repository top and the receipts folder relative to it; _NotChecked for no
    repository or a shallow one."""
    if not receipts_dir.is_dir():
        raise _NotChecked(f"{receipts_dir} is not a folder")
    try:
        out = _git(receipts_dir, "rev-parse", "--show-toplevel", "--is-shallow-repository")
    except _NotChecked as err:
        raise _NotChecked(f"no git repository at {receipts_dir} ({err})") from err
    top_text, shallow = out.decode("utf-8").splitlines()[:2]
    if shallow.strip() == "true":
        raise _NotChecked("shallow clone: earlier commits are missing (clone without --depth)")
    top = Path(top_text).resolve()
    rel = receipts_dir.resolve().relative_to(top).as_posix()
    return top, "" if rel == "." else rel


def _split(path: str, rel: str) -> tuple[str, str] | None:
    """(gate, file name) for a path inside a gate folder, else None."""
    inside = path[len(rel) + 1 :] if rel else path
    parts = inside.split("/")
    return (parts[0], parts[1]) if len(parts) == 2 else None


def _raw(out: bytes, rel: str, commit: str = "") -> list[_Change]:
    """Parse ``--raw -z`` output, with or without ``commit <sha>`` headers."""
    changes: list[_Change] = []
    tokens = iter(out.decode("utf-8", "surrogateescape").split("\0"))
    for token in tokens:
        token = token.strip()
        if token.startswith("commit "):
            commit = token.split()[1]
        elif token.startswith(":"):
            _, _, old, new, status = token[1:].split()
            where = _split(next(tokens), rel)
            if where is not None:
                changes.append(_Change(commit, status[0], *where, old, new))
    return changes


def _head_files(top: Path, scope: list[str], rel: str) -> set[tuple[str, str]]:
    """(gate, file name) of every file in HEAD; _NotChecked when there is no commit yet."""
    try:
        out = _git(top, "ls-tree", "-r", "-z", "--name-only", "HEAD", "--", *scope)
    except _NotChecked as err:
        raise _NotChecked(f"no commit holds the receipts yet ({err})") from err
    return {w for p in out.decode("utf-8").split("\0") if p and (w := _split(p, rel))}


def _changes(top: Path, scope: list[str], rel: str) -> list[_Change]:
    """Every committed change under ``scope`` (one git log), then the uncommitted ones."""
    raw = ("--no-renames", "--raw", "--no-abbrev", "-z")
    history = ("--full-history", "--diff-merges=first-parent", "--format=commit %H")
    log = _git(top, "log", *history, *raw, "--", *scope)
    diff = _git(top, "diff", *raw, "HEAD", "--", *scope)
    return _raw(log, rel) + _raw(diff, rel, WORKING_TREE)


def _wanted(changes: list[_Change]) -> set[str]:
    """The blobs a verdict needs: each earlier version, and later LEDGER/CORRECTIONS ones."""
    old = {c.old for c in changes if c.status != "A"}
    later = {c.new for c in changes if c.file in APPEND_ONLY and c.commit != WORKING_TREE}
    return old | later


def _blobs(top: Path, shas: set[str]) -> dict[str, bytes]:
    """The content of each blob, from one ``git cat-file --batch``."""
    wanted = sorted(shas - {_NULL_SHA})
    if not wanted:
        return {}
    out = _git(top, "cat-file", "--batch", stdin="".join(f"{s}\n" for s in wanted).encode())
    found: dict[str, bytes] = {}
    at = 0
    for sha in wanted:
        end = out.index(b"\n", at)
        header = out[at:end].split()
        if len(header) != 3:  # "<sha> missing": a partial clone lacks the content
            raise _NotChecked(f"git has no content for blob {sha[:12]} (partial clone?)")
        size = int(header[2])
        found[sha] = out[end + 1 : end + 1 + size]
        at = end + 1 + size + 1
    return found


def rewrite(old: bytes, new: bytes) -> tuple[str, str] | None:
    """None when ``new`` extends ``old`` line by line (only lines added at the end); else
    (change, detail) for the first place they part: a line removed, changed or inserted."""
    a = split_lines(old.decode("utf-8", "replace"))
    b = split_lines(new.decode("utf-8", "replace"))
    if b[: len(a)] == a:
        return None
    for tag, i1, _, j1, _ in SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        line = a[i1] if i1 < len(a) else ""
        if tag == "delete":
            return "line removed", f"line {i1 + 1} was {line!r}"
        if tag == "replace":
            return "line changed", f"line {i1 + 1} was {line!r}, now {b[j1]!r}"
        if i1 < len(a):
            return "line inserted", f"line {j1 + 1} {b[j1]!r} inserted above {line!r}"
    return "line changed", "the lines differ"  # pragma: no cover - an opcode always differs


def _after(c: _Change, blobs: dict[str, bytes], top: Path, rel: str) -> bytes | None:
    """The later version's bytes; None for a committed receipt (its blob id tells enough)."""
    if c.commit == WORKING_TREE:  # git does not hash the working tree: read the file
        path = top / rel / c.gate / c.file
        return path.read_bytes() if path.is_file() else b""
    return blobs[c.new] if c.file in APPEND_ONLY else None


def _violation(c: _Change, blobs: dict[str, bytes], top: Path, rel: str) -> Violation | None:
    """The violation one change is, or None for an addition, an extension or no change."""
    if c.status == "A":
        return None
    before = blobs[c.old]
    digest = hashlib.sha256(before).hexdigest()
    if c.status == "D":
        return Violation(c.gate, c.file, c.commit, "deleted", digest, earlier=before)
    after = _after(c, blobs, top, rel)
    if c.file in APPEND_ONLY:
        found = rewrite(before, after or b"")
        if found is None:
            return None
        return Violation(c.gate, c.file, c.commit, found[0], digest, found[1])
    if (after == before) if after is not None else (c.new == c.old):
        return None  # a mode change, or a stat-only difference in the working tree
    return Violation(c.gate, c.file, c.commit, "modified", digest, earlier=before)


def _judge(
    violations: list[Violation], corrections: list[Correction]
) -> tuple[list[str], list[str]]:
    """(problems, notes): each violation is a problem unless an entry covers it (a note citing
    the entry); an entry covering nothing is a problem."""
    problems: list[str] = []
    notes: list[str] = []
    used: set[tuple[str, int]] = set()
    for v in violations:
        cover = next((c for c in corrections if c.covers(v)), None)
        if cover is None:
            problems.append(v.describe())
            continue
        used.add((cover.gate, cover.line))
        erased = _failure_erased(v, cover)
        if erased:
            problems.append(erased)
            continue
        reason = cover.reason if len(cover.reason) <= 120 else cover.reason[:117] + "..."
        notes.append(
            f"{v.describe()}; acknowledged in {cover.gate}/{CORRECTIONS}:{cover.line} "
            f"({cover.date}): {reason}"
        )
    for c in corrections:
        if (c.gate, c.line) not in used:
            problems.append(
                f"{c.gate}/{CORRECTIONS}:{c.line}: acknowledges {c.change} of {c.file} in "
                f"commit {c.commit[:12]} (sha256 {c.sha256[:12]}), which the history does not show"
            )
    return problems, notes


def _failure_erased(v: Violation, cover: Correction) -> str | None:
    """A problem when ``cover`` acknowledges erasing a receipt that failed without keeping its
    text: an acknowledgement explains, it never turns a recorded failure into a pass."""
    if not cover.erases_receipt or cover.content is not None or not v.earlier:
        return None
    try:
        receipt = json.loads(v.earlier.decode("utf-8"))
        failed = [c["id"] for c in receipt["claims"] if c.get("verdict") == "fail"]
        status = derive_status(receipt)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # not a receipt: nothing it could have failed
    if status != "fail":
        return None
    shown = ", ".join(failed[:3]) or "a test"
    return (
        f"{v.gate}/{CORRECTIONS}:{cover.line}: acknowledges erasing {v.file}, which failed "
        f"({shown}), without keeping its text: add its content so the failure stays weighed"
    )


def _on_disk(receipts_dir: Path, gates: Collection[str] | None) -> set[str]:
    """Gate folders holding at least one file now."""
    names = gates if gates is not None else [d.name for d in receipts_dir.iterdir() if d.is_dir()]
    return {g for g in names if (receipts_dir / g).is_dir() and any((receipts_dir / g).iterdir())}


def _not_checked(reason: str) -> HistoryReport:
    return HistoryReport(False, reason, (), (f"history not checked: {reason}",), ())


def _walk(
    receipts_dir: Path, gates: Collection[str] | None
) -> tuple[list[Violation], set[tuple[str, str]]]:
    """Every violation under the scope, and the (gate, file) pairs in HEAD; _NotChecked when
    the history cannot be walked or nothing was ever committed."""
    top, rel = _locate(receipts_dir)
    scope = [f"{rel}/{g}" if rel else g for g in gates] if gates is not None else [rel or "."]
    committed = _head_files(top, scope, rel)
    changes = [c for c in _changes(top, scope, rel) if gates is None or c.gate in gates]
    if not committed and not changes:
        raise _NotChecked(f"the receipts in {receipts_dir} are not tracked by git")
    blobs = _blobs(top, _wanted(changes))
    found = [v for c in changes if (v := _violation(c, blobs, top, rel)) is not None]
    return found, committed


def _uncommitted_receipts(
    receipts_dir: Path, gates: Collection[str], committed: set[tuple[str, str]]
) -> list[str]:
    """One note per committed gate with receipts on disk that no commit holds yet: git cannot
    show a run removed between its writing and the commit, so their history is unchecked."""
    notes = []
    for gate in sorted(gates):
        fresh = sorted(
            p.name for p in (receipts_dir / gate).glob("*.json") if (gate, p.name) not in committed
        )
        if fresh:
            notes.append(
                f"history not checked for {gate}: {len(fresh)} receipt(s) not committed yet "
                f"(newest {fresh[-1]}); a run removed before its commit would not show"
            )
    return notes


def check_history(receipts_dir: Path, gates: Collection[str] | None = None) -> HistoryReport:
    """Walk the git history of every gate folder under ``receipts_dir`` (or only ``gates``).

    Guarantees: every deletion or modification of a receipt and every non-extending LEDGER or
    CORRECTIONS version, committed or in the working tree, is either a problem or (when a
    CORRECTIONS entry covers exactly it) a note citing the entry; never silently dropped. When
    the history cannot be walked, ``checked`` is False and nothing is a problem. Runs a fixed
    number of git commands (five), whatever the number of commits and files.
    """
    receipts_dir = Path(receipts_dir)
    try:
        found, committed = _walk(receipts_dir, gates)
    except _NotChecked as err:
        return _not_checked(str(err))
    tracked = {gate for gate, _ in committed}
    bad: list[str] = []
    corrections: list[Correction] = []
    for gate in sorted(tracked | {v.gate for v in found}):
        entries, problems = read_corrections(receipts_dir, gate)
        corrections.extend(entries)
        bad.extend(problems)
    problems, notes = _judge(found, corrections)
    untracked = sorted(_on_disk(receipts_dir, gates) - tracked)
    notes.extend(f"history not checked for {g}: no file of it in HEAD" for g in untracked)
    notes.extend(_uncommitted_receipts(receipts_dir, tracked, committed))
    return HistoryReport(True, "", tuple(problems + bad), tuple(notes), tuple(found))


def gate_history(receipts_dir: Path, gate: str) -> HistoryReport:
    """:func:`check_history` for one gate folder (the same guarantees, scoped to ``gate``)."""
    return check_history(receipts_dir, [gate])
