"""One device's standing of a gate: its newest complete run, the failures that stand in its
runs, missing and retired claims, bound changes, and the words a reader sees for them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from assay.qualify.core.status import derive_status
from assay.qualify.judging.evidence import (
    BoundChange,
    Entry,
    Failure,
    bound_changes,
    standing_failures,
)
from assay.qualify.ledger.receipt import SHA_FIELD


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
            out.append(f"{count(len(claims), 'claim')} failed: {_failed(claims)}")
        tests = [f for f in self.unexplained if f.is_test]
        if tests:
            out.append(f"{count(len(tests), 'test')} failed or errored: {_failed(tests)}")
        if self.regressions:
            out.append(f"{count(len(self.regressions), 'regression')} against the baseline")
        if self.head is None:
            return [*out, f"only partial runs ({len(self.partial_after)}), which are not a verdict"]
        if self.missing:
            out.append(
                f"{count(len(self.missing), 'claim')} missing: "
                + ", ".join(m.claim_id for m in self.missing)
            )
        inconclusive = [c["id"] for c in self.head["claims"] if c["verdict"] == "inconclusive"]
        if inconclusive:
            out.append(f"{count(len(inconclusive), 'claim')} inconclusive")
        if not self.head["claims"]:
            out.append("nothing was claimed")
        if self.skipped:
            names = ", ".join(n.rsplit("::", 1)[-1] for n in self.skipped)
            out.append(f"{count(len(self.skipped), 'test')} skipped: {names}")
        return out

    def qualifiers(self) -> list[str]:
        """What a plain ``pass`` would hide: retirements, failures explained rather than
        passed, bound changes; one phrase each."""
        out = []
        after = [r.claim_id for r in self.retired if r.after_failing]
        plain = [r.claim_id for r in self.retired if not r.after_failing]
        if after:
            out.append(f"{count(len(after), 'claim')} retired after failing: {names(after)}")
        if plain:
            out.append(f"{count(len(plain), 'claim')} retired: {names(plain)}")
        for why in dict.fromkeys(f.explained for f in self.failures if f.explained):
            if why == "retired":
                continue  # said with the retirement
            keys = [f.failure.key.rsplit("::", 1)[-1] for f in self.failures if f.explained == why]
            out.append(f"{why}: {names(list(dict.fromkeys(keys)))}")
        if self.bounds:
            shown = [f"{b.claim_id} ({b.before} -> {b.after})" for b in self.bounds]
            out.append(f"bound changed for {count(len(self.bounds), 'claim')}: {names(shown)}")
        return out


def count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def names(names: list[str], most: int = 3) -> str:
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
    return names(shown)


def claim_ids(receipt: dict[str, Any]) -> set[str]:
    return {c["id"] for c in receipt["claims"]}


def device_standing(device: str, entries: list[Entry]) -> DeviceStanding:
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
    present = claim_ids(head)
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
    # a test skipped before it declared anything (a skip mark, a fixture that skips, xfail
    # run=False) is in run.skipped only; either way it ran to no verdict
    standing.skipped = sorted(
        {t["nodeid"] for t in head["run"]["tests"] if t["outcome"] == "skipped"}
        | {s["nodeid"] for s in head["run"].get("skipped") or []}
    )
    standing.regressions = list((head.get("baseline") or {}).get("regressions") or [])
    standing.bounds = bound_changes(entries, head)
    standing.failures = [StandingFailure(f) for f in found]
    return standing


def retired_after(cid: str, entries: list[Entry]) -> tuple[str, str, str] | None:
    """(sha, created, reason) of the correction that withdraws claim ``cid``: one in a receipt
    after the last run (any device) that held the claim, a receipt that does not hold it
    itself (else it is a threshold correction, not a retirement)."""
    holding = [i for i, e in enumerate(entries) if cid in claim_ids(e.receipt)]
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


def explain_failures(d: DeviceStanding, entries: list[Entry]) -> None:
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
            found = None if f.key in retired else retired_after(f.key, entries)
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
