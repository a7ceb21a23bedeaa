"""The ``assay compare`` command: its Markdown table (worst first), ``--json``, the GitHub step
summary, and its exit code (0: nothing flipped to fail, regressed, went missing or arrived
failing, and no gate's standing fell; 1: otherwise; 2: bad input)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from assay.errors import AssayError
from assay.qualify.core.layout import RECEIPTS_FOLDER
from assay.qualify.publishing.compare import (
    CHANGES,
    FAILING,
    ClaimChange,
    Comparison,
    check_same_kind,
    compare_sides,
    root_of,
)
from assay.qualify.publishing.compare_sides import opened
from assay.qualify.publishing.render import cell
from assay.qualify.publishing.wording import number_text, plural

ROWS = 60  # changed claims shown in the table; the rest are counted


def _side(view: dict | None) -> str:
    if view is None:
        return "-"
    unit = f" {view['unit']}" if view["unit"] else ""
    value, bound = number_text(view["value"]), number_text(view["bound"])
    return f"{view['verdict']}: {value}{unit} ({view['op']} {bound})"


def _margins(row: ClaimChange) -> str:
    found = [
        number_text(v["margin"]) if v and v["margin"] is not None else "-"
        for v in (row.old, row.new)
    ]
    return " → ".join(found)


def _moved(row: ClaimChange) -> str:
    if row.moved is None:
        return "-"
    allowed = ""
    if row.tolerance is not None:
        allowed = f" (tolerance {row.tolerance:.3g} {cell(row.tolerance_mode)})"
    return f"{row.moved:+.3g}{allowed}"


def markdown(result: Comparison) -> str:
    """The comparison as Markdown: a verdict line, the changed claims worst first (unchanged
    ones counted, not listed), then each gate's standing on both sides."""
    failing = result.failing
    counts = result.counts()
    said = ", ".join(f"{n} {name}" for name, n in counts.items()) or "no claims"
    verdict = (
        f"**{plural(len(failing), 'claim')} flipped to fail, regressed, went missing or arrived "
        "failing.**"
        if failing
        else "**No claim flipped to fail, regressed, went missing or arrived failing.**"
    )
    if result.worse_standings:
        fell = ", ".join(result.worse_standings)
        verdict += f" **Standing fell in NEW for {cell(fell)}.**"
    lines = [
        f"## assay compare: {cell(result.old_label)} → {cell(result.new_label)}",
        "",
        verdict,
        "",
        f"Claims: {said}.",
        "",
    ]
    shown = [c for c in result.changes if c.change != "unchanged"]
    if shown:
        lines += [
            "| Change | Gate | Device | Claim | OLD | NEW | Margin OLD → NEW | Moved |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in shown[:ROWS]:
            mark = "**" if row.change in FAILING else ""
            lines.append(
                f"| {mark}{row.change}{mark} | {cell(row.gate)} | {cell(row.device)} | "
                f"{cell(row.claim_id)} | {cell(_side(row.old))} | {cell(_side(row.new))} | "
                f"{_margins(row)} | {_moved(row)} |"
            )
        if len(shown) > ROWS:
            lines.append(f"\n… and {len(shown) - ROWS} more changed claims (`--json` lists all).")
        lines.append("")
    for note in result.notes:
        lines += [f"Note: {cell(note)}", ""]
    if result.unpaired:
        unpaired = cell("; ".join(result.unpaired))
        lines += [f"Not compared (receipts on one side only): {unpaired}.", ""]
    lines += ["| Gate | Standing in OLD | Standing in NEW |", "|---|---|---|"]
    for gate, (old, new) in sorted(result.standings.items()):
        lines.append(f"| {cell(gate)} | {cell(old or 'absent')} | {cell(new or 'absent')} |")
    return "\n".join(lines) + "\n"


def run_compare(args: argparse.Namespace) -> int:
    root = root_of(Path(args.root) if args.root else Path.cwd())
    with opened(args.old, args.new, root) as (old, new):
        check_same_kind(old, new)
        try:
            result = compare_sides(old, new)
        except AssayError as err:  # name a git side's files as the user named the side
            raise AssayError(new.shown(old.shown(str(err)))) from None
    text = markdown(result)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        sys.stdout.write(text)
    if args.summary:
        target = os.environ.get("GITHUB_STEP_SUMMARY")
        if not target:
            raise AssayError("--summary: $GITHUB_STEP_SUMMARY is not set (GitHub Actions sets it)")
        if os.path.lexists(target) and not os.path.isfile(target):
            raise AssayError(f"{target}: $GITHUB_STEP_SUMMARY is not a regular file")
        before = os.path.getsize(target) if os.path.isfile(target) else 0
        try:
            with open(target, "a", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            with contextlib.suppress(OSError):  # whole table or none: cut back what landed
                os.truncate(target, before)
            raise AssayError(f"{target}: cannot append the summary ({exc.strerror})") from None
    return 0 if result.ok else 1


def compare_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``assay compare``."""
    summary = "what changed between two sets of receipts: flips, regressions, bounds, standings"
    parser.description = (
        f"{summary.capitalize()}. OLD and NEW are each a receipts folder, a records "
        f"folder, a receipt file, or a git revision (its {RECEIPTS_FOLDER} read from git, no "
        f"checkout). Changes, worst first: {', '.join(CHANGES)}. Exit 0 when no claim flipped "
        "to fail, regressed beyond its tolerance, went missing or arrived failing, and no "
        "gate's standing fell; 1 otherwise; 2 for bad input."
    )
    parser.add_argument("old", metavar="OLD", help="the baseline side")
    parser.add_argument("new", metavar="NEW", help="the side under review")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--summary",
        action="store_true",
        help="also append the Markdown to $GITHUB_STEP_SUMMARY (GitHub Actions' job summary)",
    )
    parser.add_argument(
        "--root",
        metavar="DIR",
        help="the git repository revisions are read from (default: the one holding the "
        "current folder)",
    )
