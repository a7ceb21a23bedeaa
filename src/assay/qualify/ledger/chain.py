"""The hash-chained ledger of one gate: ``<receipts>/<gate>/LEDGER`` plus back-links.

Two things chain a gate's receipts, oldest first:

* ``LEDGER``, an append-only text file listing ``<receipt_sha256> <file name>`` per receipt in
  the order they were written. It exists so that receipts published before back-links existed
  (legacy receipts) are covered without rewriting them: ``assay render`` migrates a gate
  without a LEDGER by listing its receipts ordered by ``(created, receipt_sha256)``.
* ``previous_receipt_sha256`` inside every receipt written since: the seal of the entry before
  it in the LEDGER (``null`` for the first receipt of a gate). It is part of the sealed
  content, so editing and re-sealing a receipt changes its seal and breaks the next receipt's
  back-link; rewriting that one breaks the one after, up to the newest.

:func:`check_chain` reports a receipt deleted (listed but missing, or skipped by a back-link),
reordered (back-link naming a later or earlier entry, or time running backwards), inserted
(a file not listed, or a listed receipt whose back-link does not name its predecessor) and a
re-sealed middle receipt (the next back-link names a seal no longer present).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from assay.atomic import atomic_write_bytes
from assay.bounded import read_text_refusing, split_lines
from assay.errors import AssayError
from assay.qualify.core.layout import GATE_NAME
from assay.qualify.ledger.receipt import (
    SHA_FIELD,
    dump_receipt,
    non_finite,
    problems_in,
    read_receipt,
    receipt_filename,
    receipt_paths,
    seal,
    write_atomic,
)

LEDGER = "LEDGER"
BACK_LINK = "previous_receipt_sha256"
HEADER = "# assay ledger v1: one receipt per line, oldest first: <receipt_sha256> <file name>\n"
_LINE = re.compile(r"^([0-9a-f]{64}) ([A-Za-z0-9TZ._-]+\.json)$")


def ledger_path(receipts_dir: Path, gate: str) -> Path:
    """Where the ledger of ``gate`` lives: ``<receipts_dir>/<gate>/LEDGER``."""
    return Path(receipts_dir) / gate / LEDGER


def read_ledger(path: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """Entries ``(sha256, file name)`` oldest first, and one problem line per malformed or
    unreadable line; AssayError (one line naming it) for a LEDGER that is a device, a link out
    of its folder, or over the size cap: bad input, not a broken ledger."""
    entries: list[tuple[str, str]] = []
    problems: list[str] = []
    try:
        lines = split_lines(read_text_refusing(path, within=Path(path).parent))
    except (OSError, UnicodeDecodeError) as err:
        return [], [f"{path}: ledger not readable ({err})"]
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            problems.append(f"{path}:{number}: expected '<sha256> <file name>.json', got {line!r}")
            continue
        entries.append((match.group(1), match.group(2)))
    return entries, problems


def _text(entries: list[tuple[str, str]]) -> bytes:
    return (HEADER + "".join(f"{sha} {name}\n" for sha, name in entries)).encode("utf-8")


def legacy_order(receipts: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str]]:
    """Ledger entries for receipts that predate the ledger: by ``(created, sha)``, oldest first."""
    ordered = sorted(receipts, key=lambda nr: (nr[1]["created"], nr[1]["receipt_sha256"]))
    return [(r["receipt_sha256"], name) for name, r in ordered]


def ensure_ledger(receipts_dir: Path, gate: str) -> bool:
    """Create the LEDGER of ``gate`` from its existing receipts if it has none (migration).

    Existing receipt files are only read, never rewritten. Returns True when a ledger was
    created. AssayError if a receipt is invalid (nothing is written then).
    """
    path = ledger_path(receipts_dir, gate)
    if path.exists():
        return False
    found = [(p.name, read_receipt(p)) for p in receipt_paths(receipts_dir, gate)]
    write_atomic(path, _text(legacy_order(found)), overwrite=False)
    return True


def chain_head(receipts_dir: Path, gate: str) -> str | None:
    """The seal of the newest receipt in the ledger of ``gate`` (None for an empty gate).

    Without a LEDGER yet, the newest legacy receipt in :func:`legacy_order` (what
    :func:`ensure_ledger` would list last)."""
    path = ledger_path(receipts_dir, gate)
    if not path.exists():
        found = [(p.name, read_receipt(p)) for p in receipt_paths(receipts_dir, gate)]
        order = legacy_order(found)
        return order[-1][0] if order else None
    entries, problems = read_ledger(path)
    if problems:
        raise AssayError(problems[0])
    return entries[-1][0] if entries else None


@contextlib.contextmanager
def locked(receipts_dir: Path, gate: str) -> Iterator[None]:
    """Hold an exclusive lock on the gate's folder while its chain head is read and extended,
    so two sessions writing the same gate cannot both link to one head (POSIX flock)."""
    folder = Path(receipts_dir) / gate
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # no flock on this platform: single writer assumed
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def append(receipts_dir: Path, gate: str, sha: str, name: str) -> None:
    """Append one entry to the ledger of ``gate`` (atomic rewrite of the small file)."""
    path = ledger_path(receipts_dir, gate)
    entries, problems = read_ledger(path) if path.exists() else ([], [])
    if problems:
        raise AssayError(problems[0])
    atomic_write_bytes(path, _text([*entries, (sha, name)]))


def _describe(sha: str, position: dict[str, int], names: dict[str, str]) -> str:
    if sha in position:
        return f"entry {position[sha] + 1} ({names[sha]})"
    return f"{sha[:12]}, which is in no ledger entry (deleted or re-sealed)"


def check_chain(gate_dir: Path, receipts: dict[str, dict[str, Any]], files: list[str]) -> list[str]:
    """Problems with the ledger of one gate, one line each naming the ledger or the file.

    ``receipts`` maps file name to each *valid* receipt of the gate; ``files`` lists every
    receipt file name present (valid or not). Checks: the LEDGER exists and parses, lists each
    present file once and only present files, its seals match the files, back-links name the
    entry before, legacy receipts (no back-link) come before every chained one, and ``created``
    never runs backwards along the legacy part (the back-links order the rest).
    """
    path = Path(gate_dir) / LEDGER
    if not path.exists():
        if not files:
            return []
        return [f"{path}: no ledger for {len(files)} receipt(s) (run `assay render` to start one)"]
    entries, problems = read_ledger(path)
    names = {sha: name for sha, name in entries}
    position = {sha: i for i, (sha, _) in enumerate(entries)}
    listed = [name for _, name in entries]
    for name in sorted({n for n in listed if listed.count(n) > 1}):
        problems.append(f"{path}: {name} is listed more than once")
    for name in sorted(set(files) - set(listed)):
        problems.append(f"{gate_dir / name}: inserted: receipt is not in the ledger {path}")
    previous: tuple[str, dict[str, Any] | None] | None = None
    chained_seen = False
    for i, (sha, name) in enumerate(entries):
        receipt = receipts.get(name)
        where = f"{path}: entry {i + 1} ({name})"
        if name not in files:
            problems.append(f"{where}: deleted: the receipt file is missing")
        elif receipt is not None and receipt["receipt_sha256"] != sha:
            problems.append(
                f"{where}: re-sealed: the file's seal is {receipt['receipt_sha256'][:12]}, "
                f"the ledger lists {sha[:12]}"
            )
        if receipt is not None:
            problems.extend(_link_problems(where, i, receipt, previous, position, names))
            if BACK_LINK in receipt:
                chained_seen = True
            elif chained_seen:
                problems.append(f"{where}: inserted: a receipt without a back-link after chained")
        previous = (sha, receipt)
    return problems


def _link_problems(
    where: str,
    i: int,
    receipt: dict[str, Any],
    previous: tuple[str, dict[str, Any] | None] | None,
    position: dict[str, int],
    names: dict[str, str],
) -> list[str]:
    problems = []
    prev_sha = None if previous is None else previous[0]
    prev_receipt = None if previous is None else previous[1]
    legacy = BACK_LINK not in receipt
    # time order only binds legacy receipts: concurrent sessions may append out of time order
    if legacy and prev_receipt is not None and receipt["created"] < prev_receipt["created"]:
        problems.append(
            f"{where}: reordered: created {receipt['created']} before the entry above it "
            f"({prev_receipt['created']})"
        )
    if legacy:
        return problems  # covered by the ledger order and time order alone
    link = receipt[BACK_LINK]
    if link == prev_sha:
        return problems
    if link is None:
        problems.append(f"{where}: inserted: back-link is null but entries precede it")
    elif prev_sha is None:
        problems.append(f"{where}: deleted: back-link names {_describe(link, position, names)}")
    elif link in position and position[link] > i - 1:
        problems.append(
            f"{where}: reordered: back-link names {_describe(link, position, names)}, "
            f"below it, not entry {i}"
        )
    elif link in position:
        first, last = position[link] + 2, i
        between = f"entry {first}" if first == last else f"entries {first}..{last}"
        problems.append(
            f"{where}: inserted or reordered: back-link names "
            f"{_describe(link, position, names)}, so {between} was not there when it was written"
        )
    else:
        problems.append(
            f"{where}: broken chain: back-link names {_describe(link, position, names)}, not "
            f"entry {i} ({prev_sha[:12]}): a receipt was deleted, inserted or re-sealed"
        )
    return problems


def write_receipt(receipt: dict[str, Any], receipts_dir: Path) -> Path:
    """Seal, validate and write ``receipt`` under ``<receipts_dir>/<gate>/``; return its path.

    The receipt is chained first: ``previous_receipt_sha256`` is set to the seal of the gate's
    newest ledger entry (null for a new gate), and the ledger gains this receipt's entry.

    An invalid receipt is never written: AssayError lists the problems instead.
    """
    sealed = _sealed_or_raise(receipt, receipts_dir)  # nothing touches the disk if invalid
    gate: str = sealed["gate"]
    with locked(receipts_dir, gate):  # another session may append meanwhile
        sealed = _sealed_or_raise(receipt, receipts_dir)
        ensure_ledger(receipts_dir, gate)  # legacy receipts start the chain
        path = Path(receipts_dir) / gate / receipt_filename(sealed)
        write_atomic(path, dump_receipt(sealed), overwrite=False)
        append(receipts_dir, gate, sealed[SHA_FIELD], path.name)
    return path


def _sealed_or_raise(receipt: dict[str, Any], receipts_dir: Path) -> dict[str, Any]:
    """``receipt`` chained onto its gate's current head and sealed; AssayError if invalid."""
    problems = non_finite(receipt, "receipt")
    sealed = receipt
    gate = receipt.get("gate")
    if not problems and isinstance(gate, str) and GATE_NAME.match(gate):
        receipt = {**receipt, BACK_LINK: chain_head(receipts_dir, gate)}
    if not problems:
        sealed = seal(receipt)
        problems = problems_in(sealed)
    if problems:
        raise AssayError(
            f"receipt for gate {receipt.get('gate', '?')!r} is invalid and was not written: "
            + "; ".join(problems)
        )
    return sealed
