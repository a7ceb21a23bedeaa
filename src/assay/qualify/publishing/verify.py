"""Verification: receipts are schema-valid and untampered, the ledger holds, and every
record and the index equal a fresh render of the gates' standings (tree-derived spans
re-derived too, so a hand edit anywhere is caught)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.bounded import read_text_bounded
from assay.errors import AssayError
from assay.qualify.core.layout import GATE_NAME
from assay.qualify.judging.standing import Standing
from assay.qualify.ledger.receipt import receipt_paths
from assay.qualify.ledger.sign import ENV_VAR, resolve_trust, signature_state, user_config_signers
from assay.qualify.publishing.index import index_of, index_path, standings
from assay.qualify.publishing.readme import readme_problems
from assay.qualify.publishing.render import project_root, record_path, record_with_banner

RECORD_MARK = "# Gate record: "


def record_problems(standing: Standing, records_dir: Path) -> list[str]:
    """The record of one gate is present and equal to a fresh render of its standing."""
    record = record_path(records_dir, standing.gate)
    if not record.is_file():
        return [f"{record}: record missing for gate {standing.gate!r} (run `assay render`)"]
    try:
        text = read_text_bounded(record, within=records_dir)
    except (OSError, UnicodeDecodeError) as err:
        return [f"{record}: record not readable ({err})"]
    if standing.receipts and text != record_with_banner(standing):
        return [
            f"{record}: record out of sync with its receipts or the working tree "
            "(hand-edited, or rendered before a change: run `assay render`)"
        ]
    from assay.qualify.publishing.history import history_problems

    return history_problems(standing, records_dir)


def _check_index(records_dir: Path, root: Path, found: list[Standing]) -> list[str]:
    """The index against a fresh render of the standings ``found`` (each receipt checked
    once, for the records and the index alike)."""
    index = index_path(records_dir)
    if not index.is_file():
        return [f"{index}: index missing (run `assay render`)"]
    try:
        fresh = index_of(found, root)
    except AssayError:
        return []  # an invalid receipt is already reported against its own file
    try:
        text = read_text_bounded(index, within=records_dir)
    except (OSError, UnicodeDecodeError) as err:
        return [f"{index}: index not readable ({err})"]
    if text != fresh:
        return [
            f"{index}: index out of sync with the receipts or the working tree "
            "(hand-edited, or rendered before a change: run `assay render`)"
        ]
    return []


def verify_signatures(
    receipts_dir: Path, records_dir: Path, *, option: str | None, require: bool
) -> tuple[list[str], list[str]]:
    """(problems, notes) for receipt signatures, trust taken as :func:`resolve_trust` says.

    Problems: a signature that does not hold or whose signer is not trusted; a named trusted
    file that is missing; an in-tree allowed-signers file differing from the trusted one;
    with ``require``, each unsigned receipt, and a refusal when no trusted signers lie
    outside the tree. Notes: each good signer, where trust came from (when anything is
    signed), and "N of M receipts unsigned" when signatures are in use but not required.
    """
    trust = resolve_trust(records_dir, option)
    problems = list(trust.problems)
    notes: list[str] = []
    if require and not trust.outside:
        problems.append(
            "--require-signatures refused: no trusted signers outside the tree (pass "
            f"--allowed-signers FILE, set ${ENV_VAR}, or write {user_config_signers()})"
        )
    found = [signature_state(path, trust.path) for path in receipt_paths(receipts_dir)]
    unsigned = [f for f in found if f.state == "unsigned"]
    for f in found:
        if f.state == "signed":
            notes.append(f"{f.path}: signed by {f.signer}: {f.detail}")
        elif f.state == "broken":
            who = f" (claims signer {f.signer})" if f.signer else ""
            problems.append(f"{f.path}: forged or broken signature{who}: {f.detail}")
        elif require:
            problems.append(f"{f.path}: unsigned, and --require-signatures is set")
    if trust.note and len(unsigned) < len(found):
        notes.insert(0, trust.note)
    in_use = trust.path is not None or len(unsigned) < len(found)
    if unsigned and in_use and not require:
        notes.append(f"{len(unsigned)} of {len(found)} receipts unsigned")
    return problems, notes


def verify_stale(receipts_dir: Path, root: Path) -> tuple[list[str], list[str]]:
    """(failing, reported) stale-record lines for every gate under ``receipts_dir`` against
    the tree at ``root`` (see :func:`stale_lines`)."""
    receipts_dir = Path(receipts_dir)
    return stale_lines(standings(receipts_dir, receipts_dir.parent, Path(root)))


def stale_lines(gates: list[Standing]) -> tuple[list[str], list[str]]:
    """(failing, reported) stale-record lines from the standings: a stale device head of a
    gate CI re-runs fails, the others are reported. A partial run after a head never hides
    the head's staleness, since the head is what the records show."""
    failing: list[str] = []
    reported: list[str] = []
    for standing in gates:
        for d in standing.devices:
            if d.stale is not None:
                (failing if d.stale.ci_runs else reported).append(d.stale.describe())
    return failing, reported


def verify_all(receipts_dir: Path, records_dir: Path, root: Path | None = None) -> list[str]:
    """Every problem :func:`verify_tree` finds, one line each naming the file."""
    return verify_tree(receipts_dir, records_dir, root)[0]


def verify_tree(
    receipts_dir: Path, records_dir: Path, root: Path | None = None
) -> tuple[list[str], list[Standing]]:
    """Every problem found, one line each naming the file, and the standings they came
    from; an empty problem list means all is well.

    Checks each receipt (readable, schema-valid, verdicts consistent, sha256 matches its
    content, filed under its gate and named after its content, corrections resolvable,
    figures present and unchanged), each gate's hash-chained LEDGER (see
    :mod:`assay.qualify.ledger.chain`), each record and the index (present, equal to a fresh render
    of the gate's standing, tree-derived spans included). A receipts folder that does not
    exist or holds no receipt is a problem: verifying nothing is not a pass.
    """
    receipts_dir, records_dir = Path(receipts_dir), Path(records_dir)
    root = root or project_root(records_dir)
    problems: list[str] = []
    if not receipts_dir.is_dir():
        return [f"{receipts_dir}: no such receipts folder: nothing to verify"], []
    for d in sorted(receipts_dir.iterdir()):
        if d.is_dir() and not GATE_NAME.match(d.name):
            problems.append(f"{d}: not a gate folder name")
    gates = standings(receipts_dir, records_dir, root)
    if not gates:
        problems.append(f"{receipts_dir}: holds no receipts: nothing to verify")
    for standing in gates:
        problems.extend(standing.problems)
        problems.extend(record_problems(standing, records_dir))
    if gates:
        problems.extend(_check_index(records_dir, root, gates))
        problems.extend(readme_problems(root, gates))
    names = {s.gate for s in gates}
    if records_dir.is_dir():
        for md in sorted(records_dir.glob("*.md")):
            try:
                with md.open("rb") as handle:  # only the first line says whether it is a record
                    first = handle.readline(len(RECORD_MARK) * 4).decode("utf-8", "replace")
            except OSError as err:
                problems.append(f"{md}: not readable ({err.strerror or err})")
                continue
            if first.startswith(RECORD_MARK) and md.stem not in names:
                problems.append(f"{md}: record has no receipts in {receipts_dir}")
        problems.extend(stray_markdown(records_dir, names, first_lines=RECORD_MARK))
    return problems, gates


def stray_markdown(records_dir: Path, gates: set[str], first_lines: str) -> list[str]:
    """One problem per Markdown file under ``records_dir`` that no gate's receipts produce:
    anything but the index and a gate's record (a file that looks like a record is already
    reported as one without receipts). A reader would take such a file for published
    evidence that nothing backs."""
    index = index_path(records_dir)
    problems = []
    for md in sorted(records_dir.rglob("*.md")):
        if md == index or (md.parent == records_dir and md.stem in gates):
            continue
        try:
            with md.open("rb") as handle:
                looks_like_record = handle.readline(len(first_lines) * 4).startswith(
                    first_lines.encode()
                )
        except OSError:
            looks_like_record = False
        if not (looks_like_record and md.parent == records_dir):
            problems.append(
                f"{md}: stray Markdown in the records: neither the index nor a gate's record, "
                "so no receipt backs it; remove it or move it out of the records folder"
            )
    return problems


@dataclass
class Report:
    """Everything ``verify`` and ``publish`` decide on: problems, notes, the standings."""

    problems: list[str]
    notes: list[str]
    standings: list[Standing]

    def as_json(self) -> dict[str, Any]:
        """``{"ok", "problems", "notes", "standings": {gate: {"status", "summary"}}}``."""
        return {
            "ok": not self.problems,
            "problems": self.problems,
            "notes": self.notes,
            "standings": {
                s.gate: {"status": s.status, "summary": s.summary()} for s in self.standings
            },
        }


def check_records(
    receipts_dir: Path,
    records_dir: Path,
    *,
    root: Path | None = None,
    stale: bool = False,
    allowed_signers: str | None = None,
    require_signatures: bool = False,
    known_heads: Path | None = None,
) -> Report:
    """The one verification ``verify`` prints and ``publish`` refuses on: receipts, ledgers,
    records and index (:func:`verify_tree`), the git history of every ledger, signatures,
    with ``known_heads`` every head a verifier recorded still in its ledger
    (:mod:`assay.qualify.publishing.heads`) and, with ``stale``, stale records of gates CI
    re-runs (others are notes)."""
    from assay.qualify.ledger.history import check_history

    receipts_dir, records_dir = Path(receipts_dir), Path(records_dir)
    root = Path(root) if root else project_root(records_dir)
    problems, gates = verify_tree(receipts_dir, records_dir, root)
    notes: list[str] = []
    if receipts_dir.is_dir():
        history = check_history(receipts_dir)
        problems.extend(history.problems)
        notes.extend(history.notes)  # an unwalked history's note names its reason
    try:
        bad, signed = verify_signatures(
            receipts_dir, records_dir, option=allowed_signers, require=require_signatures
        )
    except AssayError as err:
        bad, signed = [str(err)], []
    problems.extend(bad)
    notes.extend(signed)
    if known_heads is not None:
        from assay.qualify.publishing.heads import missing_heads

        try:
            problems.extend(missing_heads(Path(known_heads), gates))
        except AssayError as err:
            problems.append(str(err))
    if stale:
        failing, reported = stale_lines(gates)
        problems.extend(failing)
        notes.extend(f"stale (reported, not failing): {r}" for r in reported)
    # a bad CORRECTIONS line is both a ledger problem and a history one: say it once
    return Report(list(dict.fromkeys(problems)), notes, gates)
