"""The ``assay compare`` command: plain text for a terminal (worst first), ``--markdown``,
``--json``, the GitHub step summary (Markdown), and its exit code (0: nothing flipped to fail,
regressed, went missing or arrived failing, and no gate's standing fell; 1: otherwise; 2: bad
input). A regression of a claim that passes on both sides is a warning, failing only with
``--fail-on-regression``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from assay.errors import AssayError
from assay.qualify.core.layout import RECEIPTS_FOLDER
from assay.qualify.publishing.compare.changes import (
    CHANGES,
    WARNING,
    ClaimChange,
    Comparison,
    check_same_kind,
    compare_sides,
    root_of,
)
from assay.qualify.publishing.compare.sides import opened
from assay.qualify.publishing.render import cell, plain_text
from assay.qualify.publishing.wording import number_text, plural

ROWS = 60  # changed claims shown in the table; the rest are counted


def _side(view: dict[str, Any] | None) -> str:
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


def tolerance_words(mode: str | None, tolerance: float | None, unit: str = "") -> str:
    """The regression tolerance as a reader needs it: how far worse a value may get."""
    if tolerance is None:
        return ""
    amount = f"{tolerance:.3g}"
    if mode == "relative":
        return f"{amount} x |OLD|"
    if mode == "absolute":
        return f"{amount}{f' {unit}' if unit else ''}"
    return f"{amount} x max(|OLD|, |bound|)"  # threshold_scaled: error bounds far below 1


def _moved(row: ClaimChange) -> str:
    """How far the value moved, in the tolerance's units, and the tolerance in words."""
    if row.moved is None:
        return "-"
    unit = (row.new or {}).get("unit", "")
    allowed = tolerance_words(row.tolerance_mode, row.tolerance, unit)
    return f"{row.moved:+.3g}{f' (tolerance {allowed})' if allowed else ''}"


def _verdict(result: Comparison) -> list[str]:
    """The comparison's verdict as sentences: what fails it, then what only warns."""
    failing = result.failing
    lines = [
        f"{plural(len(failing), 'claim')} flipped to fail, regressed, went missing or arrived "
        "failing."
        if failing
        else "No claim flipped to fail, regressed, went missing or arrived failing."
    ]
    if result.worse_standings:
        lines.append(f"Standing fell in NEW for {', '.join(result.worse_standings)}.")
    warned = [c for c in result.changes if c.change == WARNING]
    if warned and not result.fail_on_regression:
        lines.append(
            f"Warning: {plural(len(warned), 'claim')} regressed beyond its tolerance but "
            "still passes on both sides (--fail-on-regression fails on these)."
        )
    return lines


def _counts(result: Comparison) -> str:
    said = ", ".join(f"{n} {name}" for name, n in result.counts().items()) or "no claims"
    return f"Claims: {said}."


def markdown(result: Comparison) -> str:
    """The comparison as Markdown: a verdict line, the changed claims worst first (unchanged
    ones counted, not listed), then each gate's standing on both sides."""
    failing = {id(c) for c in result.failing}
    verdict = " ".join(f"**{cell(line)}**" for line in _verdict(result))
    lines = [
        f"## assay compare: {cell(result.old_label)} → {cell(result.new_label)}",
        "",
        verdict,
        "",
        cell(_counts(result)),
        "",
    ]
    shown = [c for c in result.changes if c.change != "unchanged"]
    if shown:
        lines += [
            "| Change | Gate | Device | Claim | OLD | NEW | Margin OLD → NEW | Moved |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in shown[:ROWS]:
            mark = "**" if id(row) in failing else ""
            lines.append(
                f"| {mark}{cell(row.change)}{mark} | {cell(row.gate)} | {cell(row.device)} | "
                f"{cell(row.claim_id)} | {cell(_side(row.old))} | {cell(_side(row.new))} | "
                f"{cell(_margins(row))} | {cell(_moved(row))} |"
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


def plain(result: Comparison) -> str:
    """The comparison as plain text for a terminal: the same content as :func:`markdown`,
    with no markup, each changed claim on one line, worst first."""
    lines = [
        f"assay compare: {plain_text(result.old_label)} -> {plain_text(result.new_label)}",
        *(plain_text(line) for line in _verdict(result)),
        plain_text(_counts(result)),
    ]
    shown = [c for c in result.changes if c.change != "unchanged"]
    if shown:
        lines.append("")
        for row in shown[:ROWS]:
            where = f"{row.gate} ({row.device}) {row.claim_id}"
            lines.append(
                plain_text(
                    f"{row.change}: {where}: {_side(row.old)} -> {_side(row.new)}; margin "
                    f"{_margins(row).replace('→', '->')}; moved {_moved(row)}"
                )
            )
        if len(shown) > ROWS:
            lines.append(f"... and {len(shown) - ROWS} more changed claims (--json lists all).")
    lines += [""] + [plain_text(f"Note: {note}") for note in result.notes]
    if result.unpaired:
        lines.append(plain_text(f"Not compared (one side only): {'; '.join(result.unpaired)}."))
    lines += ["", "Standing, OLD -> NEW:"]
    width = max((len(plain_text(g)) for g in result.standings), default=0)
    for gate, (old, new) in sorted(result.standings.items()):
        lines.append(
            f"  {plain_text(gate):{width}}  {plain_text(old or 'absent')} -> "
            f"{plain_text(new or 'absent')}"
        )
    return "\n".join(line.rstrip() for line in lines) + "\n"


def run_compare(args: argparse.Namespace) -> int:
    root = root_of(Path(args.root) if args.root else Path.cwd())
    with opened(args.old, args.new, root) as (old, new):
        check_same_kind(old, new)
        try:
            result = compare_sides(old, new, fail_on_regression=args.fail_on_regression)
        except AssayError as err:  # name a git side's files as the user named the side
            raise AssayError(new.shown(old.shown(str(err)))) from None
    text = markdown(result)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        sys.stdout.write(text if args.markdown else plain(result))
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
        f"checkout). Changes, worst first: {', '.join(CHANGES)}. A move below float noise "
        "(2^-20 of the larger value) is never a regression; performance claims are compared "
        "only between runs on a like machine at a like load. Exit 0 when no claim flipped to "
        "fail, regressed beyond its tolerance while not passing, went missing or arrived "
        "failing, and no gate's standing fell; 1 otherwise (a claim that regressed but still "
        "passes on both sides is a warning, unless --fail-on-regression); 2 for bad input."
    )
    parser.add_argument("old", metavar="OLD", help="the baseline side")
    parser.add_argument("new", metavar="NEW", help="the side under review")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="machine-readable output")
    output.add_argument(
        "--markdown", action="store_true", help="Markdown (tables) instead of plain text"
    )
    parser.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 also when a claim regressed beyond its tolerance but still passes",
    )
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
