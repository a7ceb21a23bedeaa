"""docs/architecture.md names real files: every path it quotes exists, in the repository or
under src/assay, so the map and its checklists cannot drift from the code unnoticed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def quoted_paths(text: str) -> list[str]:
    """Every backquoted file path (``x/y.py``, ``a.md``) in ``text``, placeholders left out."""
    found = re.findall(r"`([\w./-]+\.(?:py|md|json|yaml))`", text)
    return sorted(set(found))


def missing(paths: list[str]) -> list[str]:
    return [
        p
        for p in paths
        if not (ROOT / p).exists()
        and not (ROOT / "src" / "assay" / p).exists()
        and not (ROOT / "src" / "assay" / "qualify" / p).exists()
        and not (ROOT / "src" / "assay" / "adapters" / p).exists()
    ]


def test_every_path_the_architecture_page_names_exists():
    paths = quoted_paths(DOC.read_text("utf-8"))
    assert len(paths) > 30
    assert missing(paths) == []


def test_a_path_that_moved_is_found():
    """Control: a page naming a file that does not exist."""
    assert missing(quoted_paths("see `train/checkpoint_store.py` and `cli/train.py`")) == [
        "train/checkpoint_store.py"
    ]
