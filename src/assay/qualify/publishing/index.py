"""The index ``records/README.md``: one row per gate, rendered from the receipts.

Each row: the gate (linking its record), what it gates (the first paragraph of the gate
module's docstring, when ``gates/gate_<name>.py`` is under the project root), the headline
claim of the receipt the standing shows, the standing's status with its reasons, date,
devices, receipt count and whether the record is stale. The stale column and the gate
description come from the working tree; they are marked, and ``verify`` re-derives them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from assay.atomic import atomic_write_bytes, replace_generated
from assay.qualify.core.layout import gate_file
from assay.qualify.judging.standing import Standing, gate_standing
from assay.qualify.ledger.chain import ensure_ledger
from assay.qualify.publishing.render import (
    cell,
    gates_in,
    load_gate,
    project_root,
    record_path,
    standing_files,
    standing_stale,
    write_generated,
)
from assay.qualify.publishing.wording import headline_text

INDEX = "README.md"
INDEX_MARK = "# Gate records"


def what_it_gates(root: Path, gate: str) -> str:
    """First paragraph of ``gates/gate_<gate>.py``'s docstring, one line; '' when absent."""
    try:
        tree = ast.parse((Path(root) / gate_file(gate)).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return ""
    doc = ast.get_docstring(tree) or ""
    first = " ".join(doc.strip().split("\n\n")[0].split())
    prefix = f"gate-{gate}:"
    return first[len(prefix) :].strip() if first.startswith(prefix) else first


def index_row(standing: Standing, root: Path) -> str:
    """One index row from a gate's standing; the tree-derived cells are marked."""
    from assay.qualify.judging.stale import cell as stale_cell
    from assay.qualify.judging.stale import from_tree

    head = standing.head
    gate = standing.gate
    what = from_tree(cell(what_it_gates(root, gate) or "n/a"))
    created = head["created"] if head else "none"
    devices = ", ".join(d.device for d in standing.devices) or "none"
    from assay.qualify.publishing.history import sparkline
    from assay.qualify.publishing.wording import headline_claim

    shown = headline_claim(head)[0] if head else None
    trend = sparkline(standing, shown["id"] if shown else None)
    headline = cell(headline_text(head)) + (f" {trend}" if trend else "")
    return (
        f"| [{cell(gate)}]({gate}.md) | {what} | {headline} | "
        f"{cell(standing.brief())} | {created} | {cell(devices)} | "
        f"{len(standing.receipts)} | {stale_cell(standing_stale(standing))} |"
    )


def standings(receipts_dir: Path, records_dir: Path, root: Path) -> list[Standing]:
    """The standing of every gate with receipts under ``receipts_dir``, sorted by gate (the git
    history walked once for all of them)."""
    from assay.qualify.ledger.history import check_history

    history = check_history(receipts_dir)
    return [
        gate_standing(receipts_dir, g, records_dir, root, history) for g in gates_in(receipts_dir)
    ]


def index_text(receipts_dir: Path, records_dir: Path, root: Path | None = None) -> str:
    """The index Markdown from every gate's standing."""
    root = root or project_root(records_dir)
    return index_of(standings(receipts_dir, records_dir, root), root)


def index_of(found: list[Standing], root: Path) -> str:
    """The index Markdown from the standings ``found`` (every gate's, sorted by gate)."""
    lines = [
        f"{INDEX_MARK}",
        "",
        "Rendered by `assay render` from the receipts under `receipts/`; do not edit. Each",
        "gate's receipts form a hash-chained ledger (`receipts/<gate>/LEDGER`), checked by",
        "`assay verify`; `assay verify --stale` lists records whose code changed since. The",
        "status is the gate's standing: the newest complete run of each device, with partial",
        "runs, missing claims and skipped tests taken into account (see docs/records.md).",
        "",
        "| Gate | What it gates | Headline claim | Status | Date (UTC) | Devices | Receipts "
        "| Stale |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [index_row(s, root) for s in found]
    return "\n".join(lines) + "\n"


def index_path(records_dir: Path) -> Path:
    """Where the index lives: ``<records>/README.md``."""
    return Path(records_dir) / INDEX


def render_index(receipts_dir: Path, records_dir: Path, root: Path | None = None) -> Path:
    """Rebuild ``<records>/README.md``; return its path."""
    path = index_path(records_dir)
    replace_generated(path, index_text(receipts_dir, records_dir, root).encode("utf-8"))
    return path


def render_all(receipts_dir: Path, records_dir: Path, root: Path | None = None) -> list[Path]:
    """Rebuild every record from the receipts; return the record paths, sorted by gate.

    Raises AssayError naming the file if any receipt is invalid or tampered: a record is
    never rendered from a receipt that does not verify. Gates without a LEDGER get one
    (legacy receipts listed by creation time); the index ``README.md`` is rebuilt too.
    """
    gates = gates_in(receipts_dir)
    for g in gates:
        ensure_ledger(receipts_dir, g)
        load_gate(receipts_dir, g)  # an invalid receipt stops the render, naming its file
    root = root or project_root(records_dir)
    found = standings(receipts_dir, records_dir, root)  # each receipt judged once for every view
    files: dict[Path, bytes] = {}
    for standing in found:
        files.update(standing_files(standing, records_dir))
    if gates:
        files[index_path(records_dir)] = index_of(found, root).encode("utf-8")
    write_generated(files)  # every destination checked before any is written
    if gates:
        fill_readme(root, found)
    return [record_path(records_dir, g) for g in gates]


def fill_readme(root: Path, found: list[Standing]) -> Path | None:
    """Refill the standing spans of ``<root>/README.md`` from the standings ``found`` (see
    :mod:`assay.qualify.publishing.readme`)."""
    from assay.qualify.publishing.readme import fill, readme_path

    path = readme_path(root)
    if path is None:
        return None
    by_gate = {s.gate: s for s in found}
    atomic_write_bytes(path, fill(path.read_text("utf-8"), by_gate).encode("utf-8"))
    return path
