"""Figures in a project's README taken from the receipts, never typed by hand.

A README marks a span ``<!--standing:GATE-->...<!--/standing-->``; ``assay render`` fills it
with that gate's standing, its headline claim and the receipt it comes from (sha256 and date),
and ``assay verify`` re-derives every span and reports one that differs.
"""

from __future__ import annotations

import re
from pathlib import Path

from assay.qualify.judging.standing import Standing
from assay.qualify.publishing.wording import headline_text

SPAN = re.compile(r"<!--standing:([A-Za-z0-9_]+)-->(.*?)<!--/standing-->", re.S)


def standing_line(standing: Standing | None, gate: str) -> str:
    """The text a span of ``gate`` holds: status and reasons, headline, receipt."""
    if standing is None or standing.head is None:
        return f"gate-{gate}: no receipts"
    head = standing.head
    return (
        f"gate-{gate}: **{standing.summary()}**; headline {headline_text(head)}; "
        f"receipt `{head['receipt_sha256'][:12]}` of {head['created']}"
    )


def fill(text: str, standings: dict[str, Standing]) -> str:
    """``text`` with every standing span re-derived from ``standings``."""
    return SPAN.sub(
        lambda m: (
            f"<!--standing:{m.group(1)}-->"
            f"{standing_line(standings.get(m.group(1)), m.group(1))}<!--/standing-->"
        ),
        text,
    )


def readme_path(root: Path) -> Path | None:
    """``<root>/README.md`` when it holds at least one standing span."""
    path = Path(root) / "README.md"
    try:
        return path if SPAN.search(path.read_text("utf-8")) else None
    except (OSError, UnicodeDecodeError):
        return None


def readme_problems(root: Path, standings: list[Standing]) -> list[str]:
    """One line when the README's standing spans differ from the receipts."""
    path = readme_path(root)
    if path is None:
        return []
    text = path.read_text("utf-8")
    if text != fill(text, {s.gate: s for s in standings}):
        return [f"{path}: a standing span differs from the receipts (run `assay render`)"]
    return []
