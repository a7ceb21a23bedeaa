"""One standing per gate: the verdict every view shows, computed once from the ledger.

The record, the index, the HTML site, ``verify``, ``verify --stale`` and ``publish`` all read
:class:`Standing`; none of them decides a verdict on its own. A standing is built from:

* the gate's receipts in LEDGER order (the ledger, never a timestamp or a sha, says which
  receipt is newer), with every problem that makes the ledger untrustworthy;
* per device, the newest *complete* receipt (the head). Partial runs after it are listed as
  "partial, not a verdict"; they never headline and never hide staleness;
* claims that an earlier complete receipt of the same device held and the head lacks
  (**missing**), unless a later receipt that lacks the claim too carries a ``gate.correct``
  entry for it (**retired**, listed on every page);
* the head's skipped tests (a skipped claim is not a pass) and baseline regressions;
* staleness of each head against the working tree.

Status words, strongest first: ``broken`` (the ledger does not verify), ``fail``,
``incomplete`` (missing claims), ``inconclusive`` (an inconclusive claim, nothing claimed,
or a skipped claim test), ``no complete run`` (partial runs only), ``pass``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.bounded import parse_json, read_text_bounded
from assay.qualify.core.source import file_sha256
from assay.qualify.ledger.chain import check_chain, ledger_path, read_ledger
from assay.qualify.ledger.receipt import (
    SHA_FIELD,
    check_corrections,
    problems_in,
    receipt_filename,
    receipt_paths,
)

STATUS_ORDER = ("broken", "fail", "incomplete", "inconclusive", "no complete run", "pass")


@dataclass(frozen=True)
class Missing:
    """A claim an earlier complete receipt of this device held and the head does not."""

    claim_id: str
    device: str
    last_seen: str  # receipt sha256
    last_seen_created: str
    last_verdict: str
    test: str


@dataclass(frozen=True)
class Retired:
    """A claim withdrawn by a dated correction in a receipt that no longer holds it."""

    claim_id: str
    device: str
    by: str  # receipt sha256 of the correction
    created: str
    reason: str


@dataclass
class DeviceStanding:
    """The standing of one device's runs of a gate."""

    device: str
    head: dict[str, Any] | None  # newest complete receipt; None when only partial runs exist
    partial_after: list[dict[str, Any]] = field(default_factory=list)
    missing: list[Missing] = field(default_factory=list)
    retired: list[Retired] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # node ids skipped in the head
    regressions: list[str] = field(default_factory=list)
    stale: Any = None  # assay.qualify.judging.stale.Staleness of the head, or None

    @property
    def status(self) -> str:
        """This device's status word (see the module docstring)."""
        if self.head is None:
            return "no complete run"
        if self.head["status"] == "fail" or self.regressions:
            return "fail"
        if self.missing:
            return "incomplete"
        if self.head["status"] == "inconclusive" or self.skipped:
            return "inconclusive"
        return "pass"

    def reasons(self) -> list[str]:
        """Why this device's status is not ``pass``, one phrase each (empty for pass)."""
        if self.head is None:
            return [f"only partial runs ({len(self.partial_after)}), which are not a verdict"]
        out = []
        failed = [c["id"] for c in self.head["claims"] if c["verdict"] == "fail"]
        if failed:
            out.append(f"{_count(len(failed), 'claim')} failed: {', '.join(failed)}")
        failures = self.head["run"].get("failures") or []
        if failures:
            out.append(f"{_count(len(failures), 'test')} failed or errored")
        if self.regressions:
            out.append(f"{_count(len(self.regressions), 'regression')} against the baseline")
        if self.missing:
            out.append(
                f"{_count(len(self.missing), 'claim')} missing: "
                + ", ".join(m.claim_id for m in self.missing)
            )
        inconclusive = [c["id"] for c in self.head["claims"] if c["verdict"] == "inconclusive"]
        if inconclusive:
            out.append(f"{_count(len(inconclusive), 'claim')} inconclusive")
        if not self.head["claims"]:
            out.append("nothing was claimed")
        if self.skipped:
            names = ", ".join(n.rsplit("::", 1)[-1] for n in self.skipped)
            out.append(f"{_count(len(self.skipped), 'test')} skipped: {names}")
        return out


@dataclass
class Standing:
    """A gate's standing: receipts in ledger order, per-device standings, problems."""

    gate: str
    receipts: list[dict[str, Any]]  # valid receipts, ledger order, oldest first
    devices: list[DeviceStanding]
    problems: list[str] = field(default_factory=list)  # the ledger does not verify

    @property
    def status(self) -> str:
        """The gate's status word: the strongest of its devices' (``broken`` on problems)."""
        if self.problems:
            return "broken"
        if not self.devices:
            return "no complete run"
        complete = [d for d in self.devices if d.head is not None]
        shown = complete or self.devices
        return min((d.status for d in shown), key=STATUS_ORDER.index)

    @property
    def head(self) -> dict[str, Any] | None:
        """The receipt a record leads with: the head of the first device in status order
        (the worst), else the newest receipt (a partial one) when nothing is complete."""
        complete = [d for d in self.devices if d.head is not None]
        if complete:
            return min(complete, key=lambda d: STATUS_ORDER.index(d.status)).head
        return self.receipts[-1] if self.receipts else None

    @property
    def newest(self) -> dict[str, Any] | None:
        """The last receipt in the ledger, complete or not."""
        return self.receipts[-1] if self.receipts else None

    def device(self, name: str) -> DeviceStanding | None:
        """The standing of device ``name``, or None."""
        return next((d for d in self.devices if d.device == name), None)

    def summary(self) -> str:
        """One line: the status word, then why (per device when several ran or any is not
        ``pass``), e.g. ``fail: cpu: fail (1 claim failed: x); cuda: pass``."""
        parts = []
        if self.problems:
            parts.append(f"{_count(len(self.problems), 'problem')} in the ledger")
        several = len(self.devices) > 1
        for d in self.devices:
            why = d.reasons()
            if why or several:
                parts.append(f"{d.device}: {d.status}" + (f" ({'; '.join(why)})" if why else ""))
        return self.status + (f": {'; '.join(parts)}" if parts else "")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _check_file(path: Path, gate: str) -> tuple[dict[str, Any] | None, list[str]]:
    try:
        data = parse_json(read_text_bounded(path, within=path.parent))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return None, [f"{path}: not readable JSON ({err})"]
    problems = []
    for p in problems_in(data):
        kind = "sha256 mismatch" if p.startswith(SHA_FIELD) else "schema invalid"
        problems.append(f"{path}: {kind}: {p}")
    if problems:
        return None, problems
    if data["gate"] != gate:
        problems.append(f"{path}: receipt of gate {data['gate']!r} filed under {gate!r}")
    if path.name != receipt_filename(data):
        problems.append(
            f"{path}: file name does not match its content (expected {receipt_filename(data)})"
        )
    return (data if not problems else None), problems


def _check_figures(path: Path, receipt: dict[str, Any], records_dir: Path) -> list[str]:
    problems = []
    for fig in receipt["figures"]:
        target = records_dir / fig["path"]
        if not target.is_file():
            problems.append(f"{path}: figure {fig['path']} is missing from {records_dir}")
        elif file_sha256(target) != fig["sha256"]:
            problems.append(f"{target}: figure sha256 differs from receipt {path.name}")
    return problems


def ledger_order(receipts_dir: Path, gate: str, found: dict[str, dict[str, Any]]) -> list[str]:
    """File names of ``found`` (file name -> receipt) oldest first: LEDGER order, then any
    file the ledger does not list by (created, sha) (a problem reported elsewhere)."""
    path = ledger_path(receipts_dir, gate)
    listed = [name for _, name in read_ledger(path)[0]] if path.exists() else []
    ordered = [n for n in dict.fromkeys(listed) if n in found]
    rest = sorted(
        (n for n in found if n not in ordered),
        key=lambda n: (found[n]["created"], found[n][SHA_FIELD]),
    )
    return ordered + rest


def load_checked(
    receipts_dir: Path, gate: str, records_dir: Path | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Valid receipts of ``gate`` in ledger order and every problem found on the way:
    unreadable, invalid or misfiled receipts, the hash chain, corrections, figures (when
    ``records_dir`` is given). One line per problem, naming the file."""
    problems: list[str] = []
    valid: dict[str, dict[str, Any]] = {}
    paths = receipt_paths(receipts_dir, gate)
    for path in paths:
        receipt, found = _check_file(path, gate)
        problems.extend(found)
        if receipt is not None:
            valid[path.name] = receipt
    problems.extend(check_chain(Path(receipts_dir) / gate, valid, [p.name for p in paths]))
    ordered = [valid[n] for n in ledger_order(receipts_dir, gate, valid)]
    for i, receipt in enumerate(ordered):
        path = Path(receipts_dir) / gate / receipt_filename(receipt)
        problems.extend(f"{path}: {p}" for p in check_corrections(receipt, ordered[:i]))
        if records_dir is not None:
            problems.extend(_check_figures(path, receipt, Path(records_dir)))
    return ordered, problems


def headline(receipts: list[dict[str, Any]]) -> dict[str, Any]:
    """Of ``receipts`` in ledger order (oldest first), the newest complete one; the newest
    partial one only when none is complete. A run with ``-k``, ``--deselect``, node ids or an
    early stop never replaces a complete run as headline (or as baseline)."""
    complete = [r for r in receipts if not r["run"].get("partial")]
    return (complete or receipts)[-1]


def _claim_ids(receipt: dict[str, Any]) -> set[str]:
    return {c["id"] for c in receipt["claims"]}


def _device_standing(device: str, receipts: list[dict[str, Any]]) -> DeviceStanding:
    """``receipts``: this device's receipts, ledger order, oldest first."""
    complete = [i for i, r in enumerate(receipts) if not r["run"].get("partial")]
    if not complete:
        return DeviceStanding(device, None, partial_after=list(receipts))
    h = complete[-1]
    head = receipts[h]
    standing = DeviceStanding(device, head, partial_after=receipts[h + 1 :])
    present = _claim_ids(head)
    last_seen: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for i in complete[:-1]:
        for claim in receipts[i]["claims"]:
            last_seen[claim["id"]] = (receipts[i], claim)
    for cid, (receipt, claim) in sorted(last_seen.items()):
        if cid in present:
            continue
        standing.missing.append(
            Missing(
                cid,
                device,
                receipt[SHA_FIELD],
                receipt["created"],
                claim["verdict"],
                claim.get("test", ""),
            )
        )
    standing.skipped = sorted(
        t["nodeid"] for t in head["run"]["tests"] if t["outcome"] == "skipped"
    )
    standing.regressions = list((head.get("baseline") or {}).get("regressions") or [])
    return standing


def _retirement(
    cid: str, last: dict[str, Any], receipts: list[dict[str, Any]]
) -> tuple[str, str, str] | None:
    """(sha, created, reason) of a correction of ``cid`` in a receipt after ``last`` that
    does not hold the claim: that is a retirement, not a threshold correction."""
    after = receipts[receipts.index(last) + 1 :]
    for receipt in after:
        if cid in _claim_ids(receipt):
            continue
        for c in receipt["corrects"]:
            if c["claim_id"] == cid:
                return receipt[SHA_FIELD], receipt["created"], c["reason"]
    return None


def standing_of(
    gate: str,
    receipts: list[dict[str, Any]],
    problems: list[str] | None = None,
    root: Path | None = None,
) -> Standing:
    """The standing of ``gate`` from its valid receipts in ledger order (oldest first).

    With ``root``, each device head's staleness is judged against that working tree."""
    by_device: dict[str, list[dict[str, Any]]] = {}
    for receipt in receipts:
        by_device.setdefault(receipt["run"]["device"], []).append(receipt)
    devices = [_device_standing(d, rs) for d, rs in sorted(by_device.items())]
    # a correction retires a claim whichever device's receipt carries it
    for d in devices:
        still = []
        for m in d.missing:
            found = _retired_anywhere(m, receipts)
            if found is None:
                still.append(m)
            else:
                d.retired.append(Retired(m.claim_id, d.device, *found))
        d.missing = still
    if root is not None:
        from assay.qualify.judging.stale import check_receipt

        for d in devices:
            d.stale = None if d.head is None else check_receipt(root, d.head)
    return Standing(gate, receipts, devices, list(problems or []))


def _retired_anywhere(m: Missing, receipts: list[dict[str, Any]]) -> tuple[str, str, str] | None:
    last = next((r for r in receipts if r[SHA_FIELD] == m.last_seen), None)
    return None if last is None else _retirement(m.claim_id, last, receipts)


def gate_standing(
    receipts_dir: Path, gate: str, records_dir: Path | None = None, root: Path | None = None
) -> Standing:
    """Load, check and judge one gate's ledger: the one standing every view shows."""
    receipts, problems = load_checked(receipts_dir, gate, records_dir)
    return standing_of(gate, receipts, problems, root)
