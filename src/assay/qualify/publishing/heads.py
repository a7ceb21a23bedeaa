"""Known heads: the newest receipt of each gate as a verifier last saw it, kept outside the tree.

Signatures show that each receipt present is what its signer signed; they cannot show that a
receipt is *missing*. Someone who can rewrite the tree and its git history (reset, gc) can roll
a gate back to an earlier, consistently signed state. What catches that is a record the tree's
editor cannot touch: ``assay verify --known-heads FILE`` fails when a receipt FILE names is gone
from its gate's ledger (an erasure acknowledged with its text kept still counts as present), and
``--record-heads FILE`` writes the heads that verified, for the next run. Keep FILE where the
trusted signers are: outside the tree (a CI cache, the reviewer's machine).

The file: one ``<gate> <receipt_sha256>`` per line, ``#`` lines are comments.
"""

from __future__ import annotations

import re
from pathlib import Path

from assay.atomic import replace_generated
from assay.bounded import read_text_bounded
from assay.errors import AssayError
from assay.qualify.judging.standing import Standing

_LINE = re.compile(r"^([A-Za-z0-9_]+) ([0-9a-f]{64})$")


def read_heads(path: Path) -> list[tuple[str, str]]:
    """(gate, receipt sha256) pairs of a known-heads file; AssayError naming the file and line
    when it is missing or malformed."""
    try:
        text = read_text_bounded(path, 1 << 20)
    except (OSError, UnicodeDecodeError) as err:
        raise AssayError(f"{path}: known heads not readable ({err})") from None
    heads = []
    for number, line in enumerate(text.split("\n"), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise AssayError(f"{path}:{number}: expected '<gate> <receipt sha256>', got {line!r}")
        heads.append((match.group(1), match.group(2)))
    return heads


def missing_heads(path: Path, standings: list[Standing]) -> list[str]:
    """One problem per known head that its gate's ledger no longer holds; each is also added
    to that gate's standing, so the gate reads ``broken`` in every view of this verification."""
    by_gate = {s.gate: s for s in standings}
    problems = []
    for gate, sha in read_heads(path):
        standing = by_gate.get(gate)
        held = set() if standing is None else {r["receipt_sha256"] for r in standing.receipts}
        if standing is not None:
            held |= {e.receipt["receipt_sha256"] for d in standing.devices for e in d.erased}
        if sha in held:
            continue
        line = (
            f"{gate}: receipt {sha[:12]}, a head {path} recorded, is gone from the ledger "
            "(the tree or its history was rolled back)"
        )
        problems.append(line)
        if standing is not None:
            standing.problems.append(line)
    return problems


def record_heads(path: Path, standings: list[Standing]) -> None:
    """Write each gate's newest receipt to ``path`` (atomically), for the next verify."""
    lines = [f"{s.gate} {s.newest['receipt_sha256']}\n" for s in standings if s.newest]
    header = "# assay known heads: <gate> <receipt sha256>; keep this file outside the tree\n"
    replace_generated(Path(path), (header + "".join(lines)).encode("utf-8"))
