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

from assay.qualify.receipt import write_atomic
from assay.qualify.render import cell, gates_in, project_root
from assay.qualify.standing import Standing, gate_standing
from assay.qualify.wording import headline_text

INDEX = "README.md"
INDEX_MARK = "# Gate records"


def what_it_gates(root: Path, gate: str) -> str:
    """First paragraph of ``gates/gate_<gate>.py``'s docstring, one line; '' when absent."""
    try:
        tree = ast.parse((Path(root) / "gates" / f"gate_{gate}.py").read_text("utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return ""
    doc = ast.get_docstring(tree) or ""
    first = " ".join(doc.strip().split("\n\n")[0].split())
    prefix = f"gate-{gate}:"
    return first[len(prefix) :].strip() if first.startswith(prefix) else first


def index_row(standing: Standing, root: Path) -> str:
    """One index row from a gate's standing; the tree-derived cells are marked."""
    from assay.qualify.render import standing_stale
    from assay.qualify.stale import cell as stale_cell
    from assay.qualify.stale import from_tree

    head = standing.head
    gate = standing.gate
    what = from_tree(cell(what_it_gates(root, gate) or "n/a"))
    created = head["created"] if head else "none"
    devices = ", ".join(d.device for d in standing.devices) or "none"
    return (
        f"| [{cell(gate)}]({gate}.md) | {what} | {cell(headline_text(head))} | "
        f"{cell(standing.summary())} | {created} | {cell(devices)} | "
        f"{len(standing.receipts)} | {stale_cell(standing_stale(standing))} |"
    )


def standings(receipts_dir: Path, records_dir: Path, root: Path) -> list[Standing]:
    """The standing of every gate with receipts under ``receipts_dir``, sorted by gate."""
    return [gate_standing(receipts_dir, g, records_dir, root) for g in gates_in(receipts_dir)]


def index_text(receipts_dir: Path, records_dir: Path, root: Path | None = None) -> str:
    """The index Markdown from every gate's standing."""
    root = root or project_root(records_dir)
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
    lines += [index_row(s, root) for s in standings(receipts_dir, records_dir, root)]
    return "\n".join(lines) + "\n"


def index_path(records_dir: Path) -> Path:
    """Where the index lives: ``<records>/README.md``."""
    return Path(records_dir) / INDEX


def render_index(receipts_dir: Path, records_dir: Path, root: Path | None = None) -> Path:
    """Rebuild ``<records>/README.md``; return its path."""
    path = index_path(records_dir)
    write_atomic(path, index_text(receipts_dir, records_dir, root).encode("utf-8"), overwrite=True)
    return path
