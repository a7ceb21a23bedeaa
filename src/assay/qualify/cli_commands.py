"""``assay render``, ``verify``, ``sign``, ``publish`` and ``import-gpu``: each command's
``*_arguments(parser)`` and ``run_*(args)``, as the command table (``assay.cli.commands``)
names them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from assay.errors import AssayError
from assay.qualify.core.layout import RECEIPTS_FOLDER
from assay.qualify.ledger.sign import sign_receipts
from assay.qualify.publishing.index import render_all
from assay.qualify.publishing.site import build_site, check_site_destination
from assay.qualify.publishing.verify import check_records


def _dirs(args: argparse.Namespace) -> tuple[Path, Path]:
    receipts = Path(args.receipts)
    records = Path(args.records) if args.records else receipts.parent
    return receipts, records


def _nothing_to_check(receipts: Path) -> str | None:
    """Why ``receipts`` cannot be verified at all (absent, not a folder, no receipt in it), or
    None: an answer of "ok" about nothing would read as a pass."""
    if not receipts.exists():
        return f"{receipts}: no such receipts folder"
    if not receipts.is_dir():
        return f"{receipts}: not a folder of receipts"
    from assay.qualify.publishing.render import gates_in

    if not gates_in(receipts):
        return f"{receipts}: holds no receipts (expected <gate>/<receipt>.json); nothing to verify"
    return None


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
    """Print each problem on one line, the notes, and each gate's standing (or JSON); 0 when
    all is well, 1 when problems exist (see :func:`assay.qualify.publishing.verify.check_records`).

    Signatures are checked whenever a receipt has one, against trusted signers from outside
    the tree (``--allowed-signers``, ``$ASSAY_ALLOWED_SIGNERS``, the user config) or, failing
    those, the in-tree file with a note. With ``--require-signatures`` every unsigned receipt
    fails, and so does having no trusted signers outside the tree. With ``--stale``, records
    whose code changed fail for gates CI re-runs and are reported for the others.
    """
    receipts, records = _dirs(args)
    empty = _nothing_to_check(receipts)
    if empty is not None:
        print(f"assay verify: {empty}", file=sys.stderr)
        return 2
    report = check_records(
        receipts,
        records,
        root=Path(args.root) if args.root else None,
        stale=args.stale,
        allowed_signers=args.allowed_signers,
        require_signatures=args.require_signatures,
        known_heads=Path(args.known_heads) if args.known_heads else None,
    )
    if args.record_heads and not report.problems:
        from assay.qualify.publishing.heads import record_heads

        record_heads(Path(args.record_heads), report.standings)
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
        return 1 if report.problems else 0
    for problem in report.problems:
        print(problem)
    for note in report.notes:
        print(f"note: {note}")
    for standing in report.standings:
        print(f"standing: {standing.gate}: {standing.summary()}")
    if not report.problems:
        print(f"ok: receipts under {receipts} verify and records in {records} match")
    return 1 if report.problems else 0


def run_sign(args: argparse.Namespace) -> int:
    """Sign every unsigned receipt with an OpenSSH key; 0 on success, 2 on a usage error."""
    receipts, _ = _dirs(args)
    try:
        made = sign_receipts(receipts, Path(args.key), resign=args.resign)
    except AssayError as err:
        print(f"assay sign: {err}", file=sys.stderr)
        return 2
    for sig in made:
        print(sig)
    if not made:
        print(f"nothing to sign under {receipts}", file=sys.stderr)
    return 0


def run_publish(args: argparse.Namespace) -> int:
    """Build the static site into ``--html DIR``: 0 on success; 1 when the records do not
    verify (nothing is built) unless ``--allow-broken``, which builds with a banner naming
    every problem on every page; 2 on a write error or a receipts folder with nothing in it."""
    receipts, records = _dirs(args)
    try:
        check_site_destination(Path(args.html))  # before the (slow) verify it would waste
    except AssayError as err:
        print(f"assay publish: {err}", file=sys.stderr)
        return 2
    empty = _nothing_to_check(receipts)
    if empty is not None:
        print(f"assay publish: {empty}", file=sys.stderr)
        return 2
    report = check_records(receipts, records, allowed_signers=args.allowed_signers)
    if report.problems and not args.allow_broken:
        for problem in report.problems:
            print(f"assay publish: {problem}", file=sys.stderr)
        print(
            f"assay publish: refused: {len(report.problems)} problem(s) above; fix them, or "
            "pass --allow-broken to publish with a banner naming them",
            file=sys.stderr,
        )
        return 1
    try:
        index = build_site(
            receipts, records, Path(args.html), problems=report.problems, found=report.standings
        )
    except OSError as err:
        print(
            f"assay publish: {args.html}: cannot write the site ({err.strerror})", file=sys.stderr
        )
        return 2
    except AssayError as err:
        print(f"assay publish: {err}", file=sys.stderr)
        return 2
    print(index)
    return 0


def run_import(args: argparse.Namespace) -> int:
    """Import a receipt archive from a GPU box (:mod:`assay.qualify.ledger.archive`), render,
    verify. 0 when the records verify afterwards, 1 when they do not, 2 when the archive is refused
    (nothing written then)."""
    from assay.qualify.ledger.archive import import_archive

    receipts, records = _dirs(args)
    try:
        done = import_archive(Path(args.archive), receipts, records)
    except (AssayError, OSError) as err:
        print(f"assay import-gpu: {err}", file=sys.stderr)
        return 2
    try:
        render_all(receipts, records)
    except (AssayError, OSError) as err:
        print(
            f"assay import-gpu: imported {len(done.written)} receipt(s), but rendering failed: "
            f"{err}",
            file=sys.stderr,
        )
        return 1
    report = check_records(receipts, records)
    if args.json:
        print(
            json.dumps(
                {
                    "imported": [str(p) for p in done.written],
                    "already_present": [str(p) for p in done.present],
                    "figures": [str(p) for p in done.figures],
                    **report.as_json(),
                },
                indent=2,
            )
        )
        return 1 if report.problems else 0
    for path in done.written:
        print(f"imported {path}")
    if done.present:
        print(f"{len(done.present)} receipt(s) already in the ledger, skipped")
    for problem in report.problems:
        print(problem)
    for standing in report.standings:
        if standing.gate in done.gates:
            print(f"standing: {standing.gate}: {standing.summary()}")
    if not report.problems:
        print(f"ok: receipts under {receipts} verify and records in {records} match")
    return 1 if report.problems else 0


def _dir_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--receipts",
        default=RECEIPTS_FOLDER,
        metavar="DIR",
        help=f"receipts folder (default: {RECEIPTS_FOLDER})",
    )
    parser.add_argument(
        "--records",
        default=None,
        metavar="DIR",
        help="records folder (default: parent of --receipts)",
    )


def render_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``assay render``."""
    _dir_options(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def verify_arguments(verify: argparse.ArgumentParser) -> None:
    """The arguments of ``assay verify``."""
    _dir_options(verify)
    verify.add_argument("--json", action="store_true", help="machine-readable output")
    verify.add_argument(
        "--stale",
        action="store_true",
        help="also list records whose implementation or gate files changed: fail for gates "
        "CI runs, report for gates needing a device or a quiet machine",
    )
    verify.add_argument(
        "--root",
        default=None,
        metavar="DIR",
        help="the project's working tree, against which staleness and the records' tree-derived "
        "text are judged (default: parent of the records folder)",
    )
    verify.add_argument(
        "--allowed-signers",
        default=None,
        metavar="FILE",
        help="trusted OpenSSH allowed-signers file, outside the tree (default: "
        "$ASSAY_ALLOWED_SIGNERS, else $XDG_CONFIG_HOME/assay/allowed_signers; "
        "<records>/allowed_signers only as an untrusted fallback, with a note)",
    )
    verify.add_argument(
        "--require-signatures",
        action="store_true",
        help="fail every unsigned receipt, and refuse without trusted signers outside the tree",
    )
    verify.add_argument(
        "--known-heads",
        default=None,
        metavar="FILE",
        help="fail when a receipt this file (kept outside the tree) recorded as a gate's head "
        "is gone from its ledger: a rollback that signatures alone cannot show",
    )
    verify.add_argument(
        "--record-heads",
        default=None,
        metavar="FILE",
        help="when everything verifies, write each gate's newest receipt to FILE for the next "
        "--known-heads",
    )


def sign_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``assay sign``."""
    _dir_options(parser)
    parser.add_argument("--key", required=True, metavar="FILE", help="OpenSSH private key")
    parser.add_argument("--resign", action="store_true", help="replace existing signatures")


def publish_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``assay publish``."""
    _dir_options(parser)
    parser.add_argument("--html", required=True, metavar="DIR", help="output folder")
    parser.add_argument(
        "--allow-broken",
        action="store_true",
        help="publish records that do not verify, with a banner naming each problem on every page",
    )
    parser.add_argument(
        "--allowed-signers",
        default=None,
        metavar="FILE",
        help="trusted OpenSSH allowed-signers file for the signature check (as for verify)",
    )


def import_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``assay import-gpu``."""
    parser.add_argument("archive", metavar="ARCHIVE", help="assay-gpu-<commit>.tar.gz")
    _dir_options(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def add_render_and_verify(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Register ``render`` and ``verify`` on another program's ``subparsers`` (the framework's
    API for a library that ships its own command line); each parsed namespace's ``func(args)``
    returns the exit code."""
    for name, arguments, run, summary in (
        (
            "render",
            render_arguments,
            run_render,
            "rebuild records/<gate>.md, the ledgers and records/README.md",
        ),
        (
            "verify",
            verify_arguments,
            run_verify,
            "check receipts' schema, sha256, ledger chain and signatures, and that records match",
        ),
    ):
        parser = subparsers.add_parser(name, help=summary, description=summary)
        arguments(parser)
        parser.set_defaults(func=run)
