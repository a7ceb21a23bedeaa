"""One standing per gate: the verdict every view shows, computed once from the ledger.

The record, the index, the HTML site, ``verify``, ``verify --stale``, ``publish`` and ``attest
--verify`` all read :class:`Standing`; none of them decides a verdict on its own. A standing is
built from:

* the gate's receipts in LEDGER order (the ledger, never a timestamp or a sha, says which
  receipt is newer), with every problem that makes the ledger untrustworthy, and the receipts
  erased under an acknowledged correction put back where they stood
  (:mod:`assay.qualify.judging.loading`);
* per device, the newest *complete* receipt (the head). Partial runs after it are listed as
  "partial, not a verdict": they never headline and never hide staleness, but a failure in
  one is never ignored;
* every failure in any run of the device (complete, partial or erased) that no later complete
  run passed under the same or a stricter bound (:mod:`assay.qualify.judging.evidence`). It
  fails the gate unless explained: its claim was retired (``pass``, "retired after failing"),
  it passes now under a looser bound with a correction citing the failing receipt, or its test
  is gone from the gate (each a qualified pass, never a plain one);
* claims that an earlier complete receipt of the same device held and the head lacks
  (**missing**), unless a later receipt that lacks the claim too carries a ``gate.correct``
  entry for it (**retired**, listed on every page);
* the head's skipped tests (a skipped claim is not a pass), baseline regressions, bound
  changes since the claim's run before, acknowledged ledger rewrites and corrections;
* staleness of each head against the working tree.

Status words, strongest first: ``broken`` (the ledger does not verify), ``fail``,
``incomplete`` (missing claims), ``inconclusive`` (an inconclusive claim, nothing claimed,
or a skipped claim test), ``no complete run`` (partial runs only), ``pass``. What a plain
``pass`` would hide (retirements, corrections, bound changes, rewrites) follows the word in
:meth:`Standing.summary`, which is the status every view shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.qualify.core.status import derive_status
from assay.qualify.judging.evidence import (
    BoundChange,
    Entry,
    Failure,
    bound_changes,
    standing_failures,
    with_erased,
)
from assay.qualify.ledger.corrections import CORRECTIONS, Correction
from assay.qualify.ledger.receipt import SHA_FIELD

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
    after_failing: bool = False  # a failure of it stood when it was withdrawn


@dataclass(frozen=True)
class StandingFailure:
    """A failure that stands, and what explains it (empty: it fails the gate)."""

    failure: Failure
    explained: str = ""


@dataclass
class DeviceStanding:
    """The standing of one device's runs of a gate."""

    device: str
    head: dict[str, Any] | None  # newest complete receipt; None when only partial runs exist
    partial_after: list[dict[str, Any]] = field(default_factory=list)
    erased: list[Entry] = field(default_factory=list)
    missing: list[Missing] = field(default_factory=list)
    retired: list[Retired] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # node ids skipped in the head
    regressions: list[str] = field(default_factory=list)
    failures: list[StandingFailure] = field(default_factory=list)
    bounds: list[BoundChange] = field(default_factory=list)
    stale: Any = None  # assay.qualify.judging.stale.Staleness of the head, or None

    @property
    def unexplained(self) -> list[Failure]:
        """Failures that still fail the gate, the newest of each claim or test."""
        newest = {f.failure.key: f.failure for f in self.failures if not f.explained}
        return list(newest.values())

    @property
    def status(self) -> str:
        """This device's status word (see the module docstring)."""
        if self.unexplained or self.regressions:
            return "fail"
        if self.head is None:
            return "no complete run"
        if derive_status(self.head) == "fail":
            return "fail"
        if self.missing:
            return "incomplete"
        if derive_status(self.head) == "inconclusive" or self.skipped:
            return "inconclusive"
        return "pass"

    def reasons(self) -> list[str]:
        """Why this device's status is not ``pass``, one phrase each (empty for pass)."""
        out = []
        claims = [f for f in self.unexplained if not f.is_test]
        if claims:
            out.append(f"{_count(len(claims), 'claim')} failed: {_failed(claims)}")
        tests = [f for f in self.unexplained if f.is_test]
        if tests:
            out.append(f"{_count(len(tests), 'test')} failed or errored: {_failed(tests)}")
        if self.regressions:
            out.append(f"{_count(len(self.regressions), 'regression')} against the baseline")
        if self.head is None:
            return [*out, f"only partial runs ({len(self.partial_after)}), which are not a verdict"]
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

    def qualifiers(self) -> list[str]:
        """What a plain ``pass`` would hide: retirements, failures explained rather than
        passed, bound changes; one phrase each."""
        out = []
        after = [r.claim_id for r in self.retired if r.after_failing]
        plain = [r.claim_id for r in self.retired if not r.after_failing]
        if after:
            out.append(f"{_count(len(after), 'claim')} retired after failing: {_names(after)}")
        if plain:
            out.append(f"{_count(len(plain), 'claim')} retired: {_names(plain)}")
        for why in dict.fromkeys(f.explained for f in self.failures if f.explained):
            if why == "retired":
                continue  # said with the retirement
            keys = [f.failure.key.rsplit("::", 1)[-1] for f in self.failures if f.explained == why]
            out.append(f"{why}: {_names(list(dict.fromkeys(keys)))}")
        if self.bounds:
            shown = [f"{b.claim_id} ({b.before} -> {b.after})" for b in self.bounds]
            out.append(f"bound changed for {_count(len(self.bounds), 'claim')}: {_names(shown)}")
        return out


@dataclass
class Standing:
    """A gate's standing: receipts in ledger order, per-device standings, problems."""

    gate: str
    receipts: list[dict[str, Any]]  # valid receipts, ledger order, oldest first
    devices: list[DeviceStanding]
    problems: list[str] = field(default_factory=list)  # the ledger does not verify
    acknowledged: list[Correction] = field(default_factory=list)  # CORRECTIONS entries

    @property
    def status(self) -> str:
        """The gate's status word: the strongest of its devices' (``broken`` on problems);
        a device with only partial runs counts when a failure in them stands."""
        if self.problems:
            return "broken"
        counted = [d for d in self.devices if d.head is not None or d.unexplained]
        if not counted:
            return "no complete run"
        return min((d.status for d in counted), key=STATUS_ORDER.index)

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

    def qualifiers(self) -> list[str]:
        """Gate-wide facts a plain ``pass`` would hide: acknowledged ledger rewrites, claim
        corrections and a change of gate file."""
        out = []
        if self.acknowledged:
            unknown = [c for c in self.acknowledged if c.erases_receipt and c.content is None]
            lines = [f"{CORRECTIONS}:{c.line}" for c in unknown]
            kept = f" ({len(unknown)} erasing a receipt whose text is not kept: {_names(lines)})"
            out.append(
                f"{_count(len(self.acknowledged), 'acknowledged ledger rewrite')}"
                + (kept if unknown else "")
            )
        corrected = [
            c for r in self.receipts for c in r["corrects"] if c["claim_id"] in _claim_ids(r)
        ]
        if corrected:
            shown = [f"{c['claim_id']} of {c['receipt_sha256'][:12]}" for c in corrected]
            out.append(f"{_count(len(corrected), 'correction')}: {_names(shown)}")
        differs = [
            f"{d.device}: {len(d.head['code']['differs_from_tree'])}"
            for d in self.devices
            if d.head is not None and d.head["code"].get("differs_from_tree")
        ]
        if differs:
            out.append(f"code that ran differs from the tree ({', '.join(differs)} files)")
        files = list(dict.fromkeys(r["gate_file"] for r in self.receipts if r.get("gate_file")))
        if len(files) > 1:
            out.append(f"gate file changed: {' -> '.join(files)}")
        return out

    def plain_pass(self) -> bool:
        """True only for ``pass`` with nothing a reader should weigh beside it."""
        return (
            self.status == "pass"
            and not self.qualifiers()
            and not any(d.qualifiers() for d in self.devices)
        )

    def summary(self) -> str:
        """One line, the status every view shows: the status word, then why and what a plain
        ``pass`` would hide (per device when several ran or any has something to say), e.g.
        ``fail: cpu: fail (1 claim failed: x); cuda: pass``."""
        parts = []
        if self.problems:
            parts.append(f"{_count(len(self.problems), 'problem')} in the ledger")
        several = len(self.devices) > 1
        for d in self.devices:
            why = [*d.reasons(), *d.qualifiers()]
            if why or several:
                parts.append(f"{d.device}: {d.status}" + (f" ({'; '.join(why)})" if why else ""))
        parts.extend(self.qualifiers())
        return self.status + (f": {'; '.join(parts)}" if parts else "")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _names(names: list[str], most: int = 3) -> str:
    """``a, b, c and 4 more``: a status cell stays one readable line."""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def _failed(failures: list[Failure]) -> str:
    """``x, y (in partial run 1a2b3c4d5e6f)``: where a failure stands if not in the head."""
    shown = []
    for f in failures:
        name = f.key.rsplit("::", 1)[-1] if f.is_test else f.key
        where = "" if f.kind == "complete" else f" (in {f.kind} run {f.receipt[:12]})"
        shown.append(name + where)
    return _names(shown)


def headline(receipts: list[dict[str, Any]]) -> dict[str, Any]:
    """Of ``receipts`` in ledger order (oldest first), the newest complete one; the newest
    partial one only when none is complete. A run with ``-k``, ``--deselect``, node ids or an
    early stop never replaces a complete run as headline (or as baseline)."""
    complete = [r for r in receipts if not r["run"].get("partial")]
    return (complete or receipts)[-1]


def _claim_ids(receipt: dict[str, Any]) -> set[str]:
    return {c["id"] for c in receipt["claims"]}


def _device_standing(device: str, entries: list[Entry]) -> DeviceStanding:
    """``entries``: this device's runs, ledger order, oldest first, erased ones included."""
    kept = [e.receipt for e in entries if e.erased_by is None]
    complete = [i for i, r in enumerate(kept) if not r["run"].get("partial")]
    erased = [e for e in entries if e.erased_by is not None]
    found = standing_failures(entries)
    if not complete:
        standing = DeviceStanding(device, None, partial_after=kept, erased=erased)
        standing.failures = [StandingFailure(f) for f in found]
        return standing
    h = complete[-1]
    head = kept[h]
    standing = DeviceStanding(device, head, partial_after=kept[h + 1 :], erased=erased)
    present = _claim_ids(head)
    last_seen: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for i in complete[:-1]:
        for claim in kept[i]["claims"]:
            last_seen[claim["id"]] = (kept[i], claim)
    for cid, (receipt, claim) in sorted(last_seen.items()):
        if cid not in present:
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
    standing.bounds = bound_changes(entries, head)
    standing.failures = [StandingFailure(f) for f in found]
    return standing


def _retired_after(cid: str, entries: list[Entry]) -> tuple[str, str, str] | None:
    """(sha, created, reason) of the correction that withdraws claim ``cid``: one in a receipt
    after the last run (any device) that held the claim, a receipt that does not hold it
    itself (else it is a threshold correction, not a retirement)."""
    holding = [i for i, e in enumerate(entries) if cid in _claim_ids(e.receipt)]
    if not holding:
        return None
    for entry in entries[holding[-1] + 1 :]:
        if entry.erased_by is not None:
            continue
        for c in entry.receipt["corrects"]:
            if c["claim_id"] == cid:
                receipt = entry.receipt
                return receipt[SHA_FIELD], receipt["created"], c["reason"]
    return None


def _explain(d: DeviceStanding, entries: list[Entry]) -> None:
    """Say what explains each standing failure of ``d``, if anything does: its claim was
    retired, it passes now under a looser bound with a correction citing the failing run, or
    its test is no longer part of the gate. A retired claim that a failure stood against is
    marked as retired after failing."""
    head_claims = {c["id"]: c for c in d.head["claims"]} if d.head else {}
    head_tests = {t["nodeid"] for t in d.head["run"]["tests"]} if d.head else set()
    retired = {r.claim_id for r in d.retired}
    explained = []
    for sf in d.failures:
        f, why = sf.failure, ""
        if not f.is_test and f.key not in head_claims:
            found = None if f.key in retired else _retired_after(f.key, entries)
            if found is not None:
                d.retired.append(Retired(f.key, d.device, *found))
                retired.add(f.key)
            why = "retired" if f.key in retired else ""
        elif not f.is_test and head_claims[f.key]["verdict"] == "pass":
            cited = [
                e.receipt[SHA_FIELD][:12]
                for e in entries
                if e.erased_by is None
                for c in e.receipt["corrects"]
                if c["receipt_sha256"] == f.receipt and c["claim_id"] == f.key
            ]
            if cited:
                why = f"passes only under a bound loosened after failing (corrected by {cited[0]})"
        elif f.is_test and d.head is not None and f.key not in head_tests:
            why = "tests removed after failing"
        explained.append(StandingFailure(f, why))
    d.failures = explained
    failing = {f.failure.key for f in d.failures if not f.failure.is_test}
    d.retired = [
        Retired(r.claim_id, r.device, r.by, r.created, r.reason, r.claim_id in failing)
        for r in d.retired
    ]


def standing_of(
    gate: str,
    receipts: list[dict[str, Any]],
    problems: list[str] | None = None,
    root: Path | None = None,
    *,
    erased: list[tuple[dict[str, Any], Correction]] | None = None,
    acknowledged: list[Correction] | None = None,
) -> Standing:
    """The standing of ``gate`` from its valid receipts in ledger order (oldest first), the
    receipts erased under acknowledged corrections (each with its entry) and every entry of
    its ``CORRECTIONS``. With ``root``, each device head's staleness is judged against that
    working tree."""
    entries = with_erased(receipts, erased or [])
    by_device: dict[str, list[Entry]] = {}
    for entry in entries:
        by_device.setdefault(entry.receipt["run"]["device"], []).append(entry)
    devices = [_device_standing(d, es) for d, es in sorted(by_device.items())]
    # a correction retires a claim whichever device's receipt carries it
    for d in devices:
        still = []
        for m in d.missing:
            found = _retired_after(m.claim_id, entries)
            if found is None:
                still.append(m)
            else:
                d.retired.append(Retired(m.claim_id, d.device, *found))
        d.missing = still
        _explain(d, entries)
    if root is not None:
        from assay.qualify.judging.stale import check_receipt

        for d in devices:
            d.stale = None if d.head is None else check_receipt(root, d.head)
    return Standing(gate, receipts, devices, list(problems or []), list(acknowledged or []))


def gate_standing(
    receipts_dir: Path, gate: str, records_dir: Path | None = None, root: Path | None = None
) -> Standing:
    """Load, check and judge one gate's ledger: the one standing every view shows."""
    from assay.qualify.judging.loading import load_ledger

    ledger = load_ledger(receipts_dir, gate, records_dir)
    return standing_of(
        gate,
        ledger.receipts,
        ledger.problems,
        root,
        erased=ledger.erased,
        acknowledged=ledger.acknowledged,
    )
