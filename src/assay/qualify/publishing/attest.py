"""``assay attest``: qualification receipts as in-toto Statements inside signed DSSE envelopes.

One ``<receipt stem>.intoto.json`` per attested receipt, a DSSE JSON envelope (payloadType
``application/vnd.in-toto+json``, see :mod:`assay.qualify.ledger.dsse` for the signature) whose
payload is the compact, key-sorted JSON of::

    _type          https://in-toto.io/Statement/v1
    subject        [one resource descriptor: the code the receipt says ran]
    predicateType  https://assay.dev/qualification-receipt/v1
    predicate      the sealed receipt, unchanged (schema assay.qualification-receipt/1)

An attestation is about what ran, never about ``HEAD`` or a wheel built later: the subject comes
from the receipt itself (:func:`receipt_subject`): the wheel it ran (``receipt.wheel``), else its
commit (``gitCommit``, with ``dirty`` as an annotation), else a digest of the code files it
hashed. Which receipts: by default each gate's shown runs (the newest complete run of each
device, as the standing says); ``--all`` for every receipt. A receipt whose code has changed in
the tree since (``verify --stale``) is refused unless ``--allow-stale``.

``--verify`` takes its trust exactly where ``assay verify`` does (``--allowed-signers``,
``$ASSAY_ALLOWED_SIGNERS``, the user's config; the tree's own file only with a note) and prints,
for each envelope, the receipt's status (recomputed from its claims) and its gate's standing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from assay.atomic import atomic_write_bytes, json_bytes
from assay.bounded import JSON_BYTES, parse_json, read_text_bounded
from assay.errors import AssayError
from assay.qualify.core.layout import RECEIPTS_FOLDER
from assay.qualify.core.source import file_sha256
from assay.qualify.core.status import derive_status
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
GIT_COMMIT = "source-tree:git-commit"
CODE_FILES = "code-files:sha256sum-of-receipt-files"


def wheel_subject(wheel: Path) -> dict[str, Any]:
    """``{"name": filename, "digest": {"sha256": ..}}`` of a wheel file; AssayError if absent."""
    if not Path(wheel).is_file():
        raise AssayError(f"{wheel}: no such wheel file")
    return {"name": Path(wheel).name, "digest": {"sha256": file_sha256(Path(wheel))}}


def files_digest(files: list[dict[str, str]]) -> str:
    """sha256 of the ``sha256sum``-style listing (``<hex>  <path>`` lines, sorted by path) of a
    receipt's code files: what it hashed when it ran."""
    listing = "".join(
        f"{f['sha256']}  {f['path']}\n" for f in sorted(files, key=lambda f: f["path"])
    )
    return hashlib.sha256(listing.encode("utf-8")).hexdigest()


def receipt_subject(receipt: dict[str, Any]) -> dict[str, Any]:
    """The code a receipt says ran, as an in-toto resource descriptor: its wheel; else its
    commit (``dirty`` and the GPU kit's tree digest as annotations); else the digest of the code
    files it hashed (:func:`files_digest`)."""
    wheel = receipt.get("wheel")
    if wheel:
        return {"name": wheel["filename"], "digest": {"sha256": wheel["sha256"]}}
    code = receipt["code"]
    if code.get("commit"):
        annotations: dict[str, Any] = {"dirty": bool(code.get("dirty"))}
        if code.get("tree_sha256"):
            annotations["tree_sha256"] = code["tree_sha256"]
        return {
            "name": GIT_COMMIT,
            "digest": {"gitCommit": code["commit"]},
            "annotations": annotations,
        }
    return {"name": CODE_FILES, "digest": {"sha256": files_digest(code["files"])}}


def make_statement(receipt: dict[str, Any], subject: dict[str, Any]) -> dict[str, Any]:
    """The in-toto Statement v1 saying ``receipt`` qualifies ``subject``."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [subject],
        "predicateType": PREDICATE_TYPE,
        "predicate": receipt,
    }


def chosen_receipts(
    receipts_dir: Path, root: Path, *, everything: bool, allow_stale: bool
) -> list[tuple[Path, dict[str, Any]]]:
    """The receipts to attest, each validated: each gate's shown runs (every device's newest
    complete run; the newest partial one where none is complete), or with ``everything`` every
    receipt. AssayError naming the first invalid receipt, or the stale ones (code changed in
    ``root`` since they ran) unless ``allow_stale``."""
    from assay.qualify.judging.stale import check_receipt
    from assay.qualify.judging.standing import gate_standing
    from assay.qualify.publishing.render import gates_in

    paths = receipt_paths(receipts_dir)
    if not paths:
        raise AssayError(f"{receipts_dir}: no receipts to attest")
    receipts = [(path, read_receipt(path)) for path in paths]
    if not everything:
        shown = set()
        for gate in gates_in(receipts_dir):
            shown |= shown_runs(gate_standing(receipts_dir, gate))
        receipts = [(p, r) for p, r in receipts if r["receipt_sha256"] in shown]
    stale = [
        f"{p.parent.name}/{p.name}: {found.describe()}"
        for p, r in receipts
        if (found := check_receipt(root, r)) is not None
    ]
    if stale and not allow_stale:
        more = f" (and {len(stale) - 1} more)" if len(stale) > 1 else ""
        raise AssayError(
            f"refused: {stale[0]}{more}; an attestation is about the code that ran, which has "
            "changed since: republish the gate, or pass --allow-stale to attest it as it ran"
        )
    return receipts


def shown_runs(standing: Any) -> set[str]:
    """The receipt seals of the runs a gate's standing shows: every device's newest complete
    run, or the newest (partial) run where no device has a complete one."""
    heads = [d.head for d in standing.devices if d.head is not None] or [standing.newest]
    return {h["receipt_sha256"] for h in heads if h is not None}


def attest(
    receipts: list[tuple[Path, dict[str, Any]]],
    key: Path,
    out: Path,
    wheel: Path | None = None,
) -> list[Path]:
    """Write one signed envelope per receipt into ``out``; their paths. Each statement's subject
    is the code its receipt says ran (:func:`receipt_subject`); with ``wheel``, every receipt
    must have run that wheel (AssayError naming the first that did not).

    Everything is checked before anything is written, so one bad receipt or key leaves ``out``
    untouched. Each file is written atomically.
    """
    signing_key = load_signing_key(key)
    if wheel is not None:
        want = wheel_subject(wheel)
        for path, receipt in receipts:
            if receipt_subject(receipt) != want:
                raise AssayError(
                    f"{path}: this receipt did not run {want['name']} (sha256 "
                    f"{want['digest']['sha256'][:12]}); an attestation is about what ran"
                )
    written = []
    for path, receipt in receipts:
        payload = canonical_json(make_statement(receipt, receipt_subject(receipt)))
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
    if problems:
        return f"predicate is not a valid receipt: {problems[0]}"
    ran = receipt_subject(statement["predicate"])
    if subjects[0] != ran:
        return (
            f"subject {subjects[0].get('name')!r} is not the code its receipt ran "
            f"({ran['name']}): an attestation is about what ran"
        )
    return None


def check_attestation(path: Path, trusted: list[Any], wheel: Path | None = None) -> dict[str, Any]:
    """A summary of a verified attestation file (signer, gate, receipt seal and status,
    subject).

    EnvelopeError when the file is unreadable, no trusted key signed it, the statement or its
    receipt is malformed (its status is recomputed from its claims), its subject is not the
    code its receipt ran, or (with ``wheel``) that code is not the wheel.
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
        "status": derive_status(receipt),
        "partial": bool(receipt["run"].get("partial")),
        "subject": subject,
    }


def _standing_of(receipts_dir: Path, result: dict[str, Any]) -> None:
    """Add what the receipts folder says of the attested receipt now: its gate's standing and
    whether it is one of the runs the standing shows."""
    from assay.qualify.judging.standing import gate_standing

    if not (Path(receipts_dir) / result["gate"]).is_dir():
        return
    standing = gate_standing(receipts_dir, result["gate"])
    result["standing"] = standing.summary()
    result["shown"] = result["receipt_sha256"] in shown_runs(standing)


def attest_line(result: dict[str, Any]) -> str:
    """The one line ``attest --verify`` prints for an envelope."""
    if not result["ok"]:
        return f"{result['file']}: {result['problem']}"
    partial = " (a partial run)" if result.get("partial") else ""
    line = (
        f"ok: {result['file']}: {result['gate']} receipt {result['receipt_sha256'][:12]}, "
        f"status {result['status']}{partial}, about {result['subject'].get('name')}, signed by "
        f"{result['signer']} ({result['keyid']})"
    )
    if "standing" in result:
        shown = "a run it shows" if result["shown"] else "not a run it shows now"
        line += f"; gate standing now: {result['standing']} ({shown})"
    return line


def _run_verify(args: argparse.Namespace) -> int:
    """Check each ``--verify`` file against the trust ``assay verify`` uses; print one line each
    (or JSON); 1 if any fails."""
    from assay.qualify.ledger.sign import ENV_VAR, resolve_trust, user_config_signers

    if args.key or args.out:
        raise AssayError("--verify checks envelopes: --key and --out do not apply")
    receipts = Path(args.receipts)
    trust = resolve_trust(receipts.parent, args.allowed_signers)
    if trust.problems:
        raise AssayError(trust.problems[0])
    if trust.path is None:
        raise AssayError(
            f"no allowed signers to trust: pass --allowed-signers FILE, set ${ENV_VAR}, or "
            f"write {user_config_signers()}"
        )
    trusted = load_allowed_signers(trust.path)
    results = []
    for name in args.verify:
        try:
            result = check_attestation(Path(name), trusted, args.wheel)
            _standing_of(receipts, result)
        except EnvelopeError as err:
            result = {"file": name, "ok": False, "problem": str(err)}
        results.append(result)
    ok = all(r["ok"] for r in results)
    if args.json:
        print(json.dumps({"ok": ok, "trust": trust.note, "results": results}, indent=2))
        return 0 if ok else 1
    if trust.note:
        print(f"note: {trust.note}")
    for result in results:
        print(attest_line(result))
    return 0 if ok else 1


def _run_sign(args: argparse.Namespace) -> int:
    """Attest the chosen receipts; print the written paths (or JSON)."""
    if not args.key or not args.out:
        raise AssayError("attest needs --key FILE and --out DIR (or --verify FILE)")
    chosen = chosen_receipts(
        Path(args.receipts), args.root, everything=args.all, allow_stale=args.allow_stale
    )
    written = attest(chosen, Path(args.key), Path(args.out), args.wheel)
    if args.json:
        subjects = [receipt_subject(r) for _, r in chosen]
        print(json.dumps({"subjects": subjects, "attestations": [str(p) for p in written]}))
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


def attest_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``assay attest``."""
    parser.add_argument(
        "--receipts",
        default=RECEIPTS_FOLDER,
        metavar="DIR",
        help=f"receipts folder (default: {RECEIPTS_FOLDER})",
    )
    parser.add_argument("--key", metavar="FILE", help="OpenSSH ed25519 private key to sign with")
    parser.add_argument("--out", metavar="DIR", help="folder for the <receipt>.intoto.json files")
    parser.add_argument(
        "--all",
        action="store_true",
        help="attest every receipt (default: the runs each gate's standing shows)",
    )
    parser.add_argument(
        "--allow-stale",
        action="store_true",
        help="attest receipts whose code changed in the tree since they ran (default: refuse)",
    )
    parser.add_argument(
        "--wheel",
        metavar="PATH",
        type=Path,
        help="require every attested receipt to have run this wheel; with --verify, check "
        "the subject is this wheel",
    )
    parser.add_argument(
        "--root",
        default=Path("."),
        type=Path,
        metavar="DIR",
        help="the project tree staleness is judged against (default: .)",
    )
    parser.add_argument("--verify", nargs="+", metavar="FILE", help="envelopes to check instead")
    parser.add_argument(
        "--allowed-signers",
        metavar="FILE",
        help="trusted OpenSSH allowed-signers (or .pub) file for --verify; default as for "
        "assay verify: $ASSAY_ALLOWED_SIGNERS, else the user's config, else the tree's "
        "allowed_signers with a note",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
