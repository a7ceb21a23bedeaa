"""``assay render`` and ``assay verify``: argparse wiring for the CLI (src/assay/cli.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from assay.errors import AssayError
from assay.qualify.render import render_all
from assay.qualify.verify import verify_all

DEFAULT_RECEIPTS = Path("records/receipts")


def _dirs(args: argparse.Namespace) -> tuple[Path, Path]:
    receipts = Path(args.receipts)
    records = Path(args.records) if args.records else receipts.parent
    return receipts, records


def run_render(args: argparse.Namespace) -> int:
    """Rebuild every record; print the paths (or JSON). 0 on success, 2 on invalid receipts."""
    receipts, records = _dirs(args)
    try:
        paths = render_all(receipts, records)
    except AssayError as err:
        print(f"assay render: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"records": [str(p) for p in paths]}, indent=2))
    else:
        for path in paths:
            print(path)
        if not paths:
            print(f"no receipts under {receipts}", file=sys.stderr)
    return 0


def run_verify(args: argparse.Namespace) -> int:
    """Print each problem on one line (or JSON); 0 when all is well, 1 when problems exist."""
    receipts, records = _dirs(args)
    problems = verify_all(receipts, records)
    if args.json:
        print(json.dumps({"ok": not problems, "problems": problems}, indent=2))
    else:
        for problem in problems:
            print(problem)
        if not problems:
            print(f"ok: receipts under {receipts} verify and records in {records} match")
    return 1 if problems else 0


def add_render_and_verify(subparsers: argparse._SubParsersAction) -> None:
    """Register ``render`` and ``verify`` on ``subparsers``; each sets ``func`` to a callable
    taking the parsed namespace and returning the exit code."""
    for name, func, summary in (
        ("render", run_render, "rebuild records/<gate>.md from all receipts"),
        ("verify", run_verify, "check receipts' schema and sha256 and that records match"),
    ):
        parser = subparsers.add_parser(name, help=summary, description=summary)
        parser.add_argument(
            "--receipts",
            default=str(DEFAULT_RECEIPTS),
            metavar="DIR",
            help="receipts folder (default: records/receipts)",
        )
        parser.add_argument(
            "--records",
            default=None,
            metavar="DIR",
            help="records folder (default: parent of --receipts)",
        )
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        parser.set_defaults(func=func)
