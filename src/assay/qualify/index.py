"""The index ``records/README.md``: one row per gate, rendered from the receipts.

Each row: the gate (linking its record), what it gates (the first paragraph of the gate
module's docstring, when ``gates/gate_<name>.py`` is under the project root), the headline
claim (the newest receipt's first claim) with value and threshold, status, date, device,
receipt count and whether the record is stale. The stale column and the gate description come
from the working tree, so they are wrapped in markers that the sync check masks.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from assay.qualify.receipt import newest_first, write_atomic
from assay.qualify.render import cell, gates_in, load_gate, num, project_root

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


def headline(receipt: dict[str, Any]) -> str:
    """The newest receipt's first claim: id, measured value, threshold, verdict."""
    if not receipt["claims"]:
        return "no claims"
    c = receipt["claims"][0]
    unit = f" {c['measurement']['unit']}" if c["measurement"]["unit"] else ""
    t = c["threshold"]
    derived = " (derived: arithmetic)" if c.get("derived") else ""
    return (
        f"{c['id']}: {num(c['measurement']['value'])}{unit}{derived} "
        f"(threshold {t['op']} {num(t['value'])}{unit}) {c['verdict']}"
    )


def index_text(receipts_dir: Path, records_dir: Path, root: Path | None = None) -> str:
    """The index Markdown from every gate's receipts (AssayError on an invalid receipt)."""
    from assay.qualify.stale import cell as stale_cell
    from assay.qualify.stale import check_gate, from_tree

    root = root or project_root(records_dir)
    lines = [
        f"{INDEX_MARK}",
        "",
        "Rendered by `assay render` from the receipts under `receipts/`; do not edit. Each",
        "gate's receipts form a hash-chained ledger (`receipts/<gate>/LEDGER`), checked by",
        "`assay verify`; `assay verify --stale` lists records whose code changed since.",
        "",
        "| Gate | What it gates | Headline claim | Status | Date (UTC) | Device | Receipts "
        "| Stale |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for gate in gates_in(receipts_dir):
        receipts = load_gate(receipts_dir, gate)
        head = newest_first(receipts)[0]
        stale = stale_cell(check_gate(root, receipts))
        what = from_tree(cell(what_it_gates(root, gate) or "n/a"))
        lines.append(
            f"| [{cell(gate)}]({gate}.md) | {what} | "
            f"{cell(headline(head))} | {head['status']} | {head['created']} | "
            f"{head['run']['device']} | {len(receipts)} | {stale} |"
        )
    return "\n".join(lines) + "\n"


def index_path(records_dir: Path) -> Path:
    """Where the index lives: ``<records>/README.md``."""
    return Path(records_dir) / INDEX


def render_index(receipts_dir: Path, records_dir: Path, root: Path | None = None) -> Path:
    """Rebuild ``<records>/README.md``; return its path."""
    path = index_path(records_dir)
    write_atomic(path, index_text(receipts_dir, records_dir, root).encode("utf-8"), overwrite=True)
    return path
