"""``assay attest``: every receipt as an in-toto Statement v1 inside a signed DSSE envelope.

One ``<receipt stem>.intoto.json`` per receipt, a DSSE JSON envelope (payloadType
``application/vnd.in-toto+json``, see :mod:`assay.qualify.ledger.dsse` for the signature) whose
payload is the compact, key-sorted JSON of::

    _type          https://in-toto.io/Statement/v1
    subject        [one resource descriptor: what the receipts qualify]
    predicateType  https://assay.dev/qualification-receipt/v1
    predicate      the sealed receipt, unchanged (schema assay.qualification-receipt/1)

The predicate keeps its ``receipt_sha256`` seal, so a reader can re-check the receipt alone.

The subject is, with ``--wheel PATH``, ``{"name": <wheel filename>, "digest": {"sha256": ..}}``
(the file's sha256, the digest pip and PyPI record). Otherwise it is the source tree at
``--root``, named after how its digest was made so that anyone can recompute it:

- ``source-tree:git-ls-tree-HEAD`` in a git checkout: the sha256 of the output of
  ``git -c core.quotepath=true ls-tree -r --full-tree HEAD`` (mode, type, object id and path
  of every committed file), plus ``gitCommit``. Committed content only: uncommitted edits are
  not covered (the receipt's ``code.dirty`` says whether there were any when it was made).
- ``source-tree:sha256sum-pyproject-src`` without git: the sha256 of the ``sha256sum``-style
  listing (``<hex>  <path>`` lines sorted by path) of ``pyproject.toml`` and every regular
  file under ``src/``, leaving out dot-names, ``__pycache__`` and ``*.pyc``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from assay.atomic import atomic_write_bytes, json_bytes
from assay.bounded import JSON_BYTES, parse_json, read_text_bounded
from assay.errors import AssayError
from assay.qualify.core.source import file_sha256
from assay.qualify.ledger.dsse import (
    PAYLOAD_TYPE,
    EnvelopeError,
    load_allowed_signers,
    load_signing_key,
    open_envelope,
    sign_envelope,
)
from assay.qualify.ledger.receipt import canonical_json, problems_in, read_receipt, receipt_paths

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://assay.dev/qualification-receipt/v1"
SUFFIX = ".intoto.json"
GIT_TREE = "source-tree:git-ls-tree-HEAD"
FILE_TREE = "source-tree:sha256sum-pyproject-src"
DEFAULT_RECEIPTS = Path("records/receipts")


def wheel_subject(wheel: Path) -> dict[str, Any]:
    """``{"name": filename, "digest": {"sha256": ..}}`` of a wheel file; AssayError if absent."""
    if not Path(wheel).is_file():
        raise AssayError(f"{wheel}: no such wheel file")
    return {"name": Path(wheel).name, "digest": {"sha256": file_sha256(Path(wheel))}}


def _git(root: Path, *argv: str) -> subprocess.CompletedProcess[bytes] | None:
    """``git -C root argv`` (None when git is not installed)."""
    try:
        return subprocess.run(
            ["git", "-C", str(root), *argv], capture_output=True, timeout=60, check=False
        )
    except FileNotFoundError:
        return None


def _git_tree_subject(root: Path) -> dict[str, Any] | None:
    """The git-mode subject of ``root``; None when ``root`` is not inside a git work tree."""
    inside = _git(root, "rev-parse", "--is-inside-work-tree")
    if inside is None or inside.returncode != 0 or inside.stdout.strip() != b"true":
        return None
    head = _git(root, "rev-parse", "--verify", "-q", "HEAD^{commit}")
    listing = _git(root, "-c", "core.quotepath=true", "ls-tree", "-r", "--full-tree", "HEAD")
    if head is None or listing is None or head.returncode or listing.returncode:
        raise AssayError(f"{root}: git repository without a commit: nothing to attest")
    digest = {"sha256": hashlib.sha256(listing.stdout).hexdigest()}
    digest["gitCommit"] = head.stdout.decode().strip()
    return {"name": GIT_TREE, "digest": digest}


def _source_files(root: Path) -> list[str]:
    """POSIX paths (relative to ``root``) of pyproject.toml and the files under src/, sorted."""
    found = [root / "pyproject.toml"] if (root / "pyproject.toml").is_file() else []
    if (root / "src").is_dir():
        found += (root / "src").rglob("*")
    paths = []
    for path in found:
        rel = path.relative_to(root)
        skip = any(p.startswith(".") or p == "__pycache__" for p in rel.parts)
        if not skip and path.suffix != ".pyc" and path.is_file() and not path.is_symlink():
            paths.append(rel.as_posix())
    return sorted(paths)


def files_listing(root: Path) -> bytes:
    """The ``sha256sum`` output for :func:`_source_files`: ``<hex>  <path>`` per line."""
    paths = _source_files(root)
    if not paths:
        raise AssayError(f"{root}: no pyproject.toml or src/ to take a source digest of")
    return "".join(f"{file_sha256(root / p)}  {p}\n" for p in paths).encode("utf-8")


def tree_subject(root: Path) -> dict[str, Any]:
    """The source tree's subject: git mode inside a work tree, file-listing mode outside one."""
    found = _git_tree_subject(Path(root))
    if found is not None:
        return found
    digest = hashlib.sha256(files_listing(Path(root))).hexdigest()
    return {"name": FILE_TREE, "digest": {"sha256": digest}}


def make_statement(receipt: dict[str, Any], subject: dict[str, Any]) -> dict[str, Any]:
    """The in-toto Statement v1 saying ``receipt`` qualifies ``subject``."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [subject],
        "predicateType": PREDICATE_TYPE,
        "predicate": receipt,
    }


def attest(receipts_dir: Path, key: Path, out: Path, subject: dict[str, Any]) -> list[Path]:
    """Write one signed envelope per receipt under ``receipts_dir`` into ``out``; their paths.

    Every receipt is read and validated before anything is written, so one bad receipt or
    key leaves ``out`` untouched (AssayError naming it). Each file is written atomically.
    """
    signing_key = load_signing_key(key)
    paths = receipt_paths(receipts_dir)
    if not paths:
        raise AssayError(f"{receipts_dir}: no receipts to attest")
    receipts = [(path, read_receipt(path)) for path in paths]
    written = []
    for path, receipt in receipts:
        payload = canonical_json(make_statement(receipt, subject))
        target = Path(out) / (path.stem + SUFFIX)
        atomic_write_bytes(target, json_bytes(sign_envelope(payload, signing_key)))
        written.append(target)
    return written


def _statement_problem(statement: Any) -> str | None:
    """What is wrong with a signed statement's shape or receipt; None when it is sound."""
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        return f"payload is not an in-toto Statement ({STATEMENT_TYPE})"
    if statement.get("predicateType") != PREDICATE_TYPE:
        return f"predicateType is {statement.get('predicateType')!r}, not {PREDICATE_TYPE}"
    subjects = statement.get("subject")
    if not isinstance(subjects, list) or len(subjects) != 1 or not isinstance(subjects[0], dict):
        return "statement must name exactly one subject"
    problems = problems_in(statement.get("predicate"))
    return f"predicate is not a valid receipt: {problems[0]}" if problems else None


def check_attestation(path: Path, trusted: list[Any], wheel: Path | None = None) -> dict[str, Any]:
    """A summary of a verified attestation file (signer, gate, receipt seal, subject).

    EnvelopeError when the file is unreadable, no trusted key signed it, the statement or its
    receipt is malformed, or (with ``wheel``) the subject's sha256 is not the wheel's.
    """
    try:
        envelope = parse_json(read_text_bounded(path, JSON_BYTES))  # capped: /dev/zero too
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise EnvelopeError(f"not a readable JSON envelope ({err})") from None
    opened = open_envelope(envelope, trusted)
    if opened.payload_type != PAYLOAD_TYPE:
        raise EnvelopeError(f"payloadType is {opened.payload_type!r}, not {PAYLOAD_TYPE}")
    try:
        statement = parse_json(opened.payload)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise EnvelopeError("signed payload is not JSON") from None
    problem = _statement_problem(statement)
    if problem:
        raise EnvelopeError(problem)
    subject, receipt = statement["subject"][0], statement["predicate"]
    if wheel is not None:
        want = wheel_subject(wheel)["digest"]["sha256"]
        if subject.get("digest", {}).get("sha256") != want:
            raise EnvelopeError(f"subject is not {Path(wheel).name} (sha256 differs)")
    return {
        "file": str(path),
        "ok": True,
        "signer": opened.principal,
        "keyid": opened.keyid,
        "gate": receipt["gate"],
        "receipt_sha256": receipt["receipt_sha256"],
        "subject": subject,
    }


def _run_verify(args: argparse.Namespace) -> int:
    """Check each ``--verify`` file; print one line each (or JSON); 1 if any fails."""
    if args.key or args.out:
        raise AssayError("--verify checks envelopes: --key and --out do not apply")
    allowed = Path(args.allowed_signers or Path(args.receipts).parent / "allowed_signers")
    trusted = load_allowed_signers(allowed)
    results = []
    for name in args.verify:
        try:
            results.append(check_attestation(Path(name), trusted, args.wheel))
        except EnvelopeError as err:
            results.append({"file": name, "ok": False, "problem": str(err)})
    if args.json:
        print(json.dumps({"ok": all(r["ok"] for r in results), "results": results}, indent=2))
    for r in [] if args.json else results:
        if r["ok"]:
            print(
                f"ok: {r['file']}: {r['gate']} receipt {r['receipt_sha256'][:12]} about "
                f"{r['subject'].get('name')}, signed by {r['signer']} ({r['keyid']})"
            )
        else:
            print(f"{r['file']}: {r['problem']}")
    return 0 if all(r["ok"] for r in results) else 1


def _run_sign(args: argparse.Namespace) -> int:
    """Attest every receipt; print the written paths (or JSON)."""
    if not args.key or not args.out:
        raise AssayError("attest needs --key FILE and --out DIR (or --verify FILE)")
    subject = wheel_subject(args.wheel) if args.wheel else tree_subject(args.root)
    written = attest(Path(args.receipts), Path(args.key), Path(args.out), subject)
    if args.json:
        print(json.dumps({"subject": subject, "attestations": [str(p) for p in written]}))
    else:
        print("\n".join(str(p) for p in written))
    return 0


def run_attest(args: argparse.Namespace) -> int:
    """Sign or verify attestations; 0 when done, 1 when a verified file fails, 2 on an error
    (printed as one ``assay attest:`` line on stderr, no traceback)."""
    try:
        return _run_verify(args) if args.verify else _run_sign(args)
    except AssayError as err:
        print(f"assay attest: {err}", file=sys.stderr)
    except OSError as err:
        print(f"assay attest: {err.filename or ''}: {err.strerror or err}", file=sys.stderr)
    return 2


def add_attest(subparsers: argparse._SubParsersAction) -> None:
    """Register ``attest`` on ``subparsers``; ``func`` takes the namespace, returns the code."""
    summary = "write receipts as signed in-toto statements (DSSE), or verify them"
    parser = subparsers.add_parser("attest", help=summary, description=summary)
    parser.add_argument(
        "--receipts",
        default=str(DEFAULT_RECEIPTS),
        metavar="DIR",
        help="receipts folder (default: records/receipts)",
    )
    parser.add_argument("--key", metavar="FILE", help="OpenSSH ed25519 private key to sign with")
    parser.add_argument("--out", metavar="DIR", help="folder for the <receipt>.intoto.json files")
    parser.add_argument(
        "--wheel",
        metavar="PATH",
        type=Path,
        help="the subject is this wheel (default: the source tree at --root); "
        "with --verify, check the subject is this wheel",
    )
    parser.add_argument(
        "--root",
        default=".",
        type=Path,
        metavar="DIR",
        help="source tree for the subject digest (default: .)",
    )
    parser.add_argument("--verify", nargs="+", metavar="FILE", help="envelopes to check instead")
    parser.add_argument(
        "--allowed-signers",
        metavar="FILE",
        help="OpenSSH allowed-signers or .pub file for --verify "
        "(default: allowed_signers beside the receipts folder)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run_attest)
