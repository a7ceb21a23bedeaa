"""What one device's runs of a gate say about failures and bounds: the arithmetic behind
"failures are never erased" (I1) and "the bound is part of the claim" (I8), with no I/O.

A run is an :class:`Entry`: a receipt in ledger order, complete or partial, or erased from the
ledger under an acknowledged correction (its text kept in ``CORRECTIONS``). A failure of a claim
in any entry stands until a later *complete* run of the same device passes that claim under the
same or a stricter bound; a failure of a test's own code stands until a later complete run
passes that test. What stands is listed; the standing decides what explains it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from assay.qualify.core.status import own_failures
from assay.qualify.ledger.corrections import Correction


@dataclass(frozen=True)
class Entry:
    """One run in ledger order: its receipt, and the acknowledgement that erased it, if any."""

    receipt: dict[str, Any]
    erased_by: Correction | None = None

    @property
    def complete(self) -> bool:
        """A run in the ledger that every selected test of the gate ran to a verdict in."""
        return self.erased_by is None and not self.receipt["run"].get("partial")

    @property
    def kind(self) -> str:
        """``complete``, ``partial`` or ``erased``: how the run stands in the ledger."""
        if self.erased_by is not None:
            return "erased"
        return "partial" if self.receipt["run"].get("partial") else "complete"


@dataclass(frozen=True)
class Failure:
    """A claim (or a test's own code) that failed in some run and that no later complete run of
    the device has passed since, under the same or a stricter bound."""

    key: str  # the claim id, or the test's node id
    is_test: bool
    receipt: str  # sha256 of the run that failed it
    created: str
    kind: str  # complete, partial or erased: the run it failed in
    bound: str  # the claim's bound then ("" for a test)


def bound_of(claim: dict[str, Any]) -> tuple[str, float, str]:
    """(operator, value, unit) of a claim's threshold: a bound means nothing without its unit."""
    unit = (claim.get("measurement") or {}).get("unit", "")
    return claim["threshold"]["op"], claim["threshold"]["value"], unit


def same_or_stricter(new: tuple[str, float, str], old: tuple[str, float, str]) -> bool:
    """True when meeting ``new`` implies meeting ``old`` (e.g. ``<= 1e-5`` vs ``<= 1e-4``,
    ``< 1`` vs ``<= 1``); an operator of the other direction, or another unit (``0.01 s``
    is not ``1 ms``), is never stricter."""
    (op_new, v_new, unit_new), (op_old, v_old, unit_old) = new, old
    if unit_new != unit_old:
        return False
    if op_new == "==" or op_old == "==":
        return op_new == op_old and v_new == v_old
    upper = {"<", "<="}
    if (op_new in upper) != (op_old in upper):
        return False
    if v_new != v_old:
        return v_new < v_old if op_new in upper else v_new > v_old
    return op_new == op_old or op_new in ("<", ">")


def bound_text(claim: dict[str, Any]) -> str:
    """``<= 0.0001 ms`` with the regression tolerance, as a bound is compared across runs
    (the value in full: a bound of 5.0000001 is not shown as 5)."""
    t = claim["threshold"]
    tol = t["tolerance"]
    shown = f"{tol['value']!r} {tol['mode']}" if isinstance(tol, dict) else f"{tol!r}"
    unit = (claim.get("measurement") or {}).get("unit", "")
    return f"{t['op']} {t['value']!r}{' ' + unit if unit else ''} (tolerance {shown})"


def failed_tests(receipt: dict[str, Any]) -> set[str]:
    """Node ids of the tests whose own code failed or errored in a run (a claim's verdict
    failing its test is the claim's, not the test's)."""
    run = receipt["run"]
    bad = {t["nodeid"] for t in run.get("tests") or [] if t["outcome"] in ("failed", "error")}
    return bad | {f["nodeid"] for f in own_failures(run)}


def _passes(entry: Entry, claim_id: str, bound: tuple[str, float, str]) -> bool:
    claim = next((c for c in entry.receipt["claims"] if c["id"] == claim_id), None)
    return (
        claim is not None
        and claim["verdict"] == "pass"
        and same_or_stricter(bound_of(claim), bound)
    )


def _test_passes(entry: Entry, nodeid: str) -> bool:
    tests = {t["nodeid"]: t["outcome"] for t in entry.receipt["run"].get("tests") or []}
    return tests.get(nodeid) == "passed" and nodeid not in failed_tests(entry.receipt)


def standing_failures(entries: list[Entry]) -> list[Failure]:
    """Every failure in ``entries`` (one device, ledger order) that no later complete run
    cleared, oldest first."""
    found = []
    for i, entry in enumerate(entries):
        receipt = entry.receipt
        later = [e for e in entries[i + 1 :] if e.complete]
        for claim in receipt["claims"]:
            if claim["verdict"] != "fail":
                continue
            if any(_passes(e, claim["id"], bound_of(claim)) for e in later):
                continue
            found.append(
                Failure(
                    claim["id"],
                    False,
                    receipt["receipt_sha256"],
                    receipt["created"],
                    entry.kind,
                    bound_text(claim),
                )
            )
        for nodeid in sorted(failed_tests(receipt)):
            if not any(_test_passes(e, nodeid) for e in later):
                found.append(
                    Failure(
                        nodeid, True, receipt["receipt_sha256"], receipt["created"], entry.kind, ""
                    )
                )
    return found


@dataclass(frozen=True)
class BoundChange:
    """A claim of the shown run whose bound differs from its run before (same device)."""

    claim_id: str
    before: str
    after: str
    receipt: str  # the earlier run's sha256


def bound_changes(entries: list[Entry], head: dict[str, Any]) -> list[BoundChange]:
    """For each claim of ``head``, a change of operator, value, unit or tolerance since the newest
    earlier run (complete, partial or erased) of ``entries`` that held it."""
    at = next(i for i, e in enumerate(entries) if e.receipt is head)
    changes = []
    for claim in head["claims"]:
        before = next(
            (
                (e.receipt, c)
                for e in reversed(entries[:at])
                for c in e.receipt["claims"]
                if c["id"] == claim["id"]
            ),
            None,
        )
        if before is not None and (
            before[1]["threshold"] != claim["threshold"] or bound_of(before[1]) != bound_of(claim)
        ):
            changes.append(
                BoundChange(
                    claim["id"],
                    bound_text(before[1]),
                    bound_text(claim),
                    before[0]["receipt_sha256"],
                )
            )
    return changes


def with_erased(
    receipts: list[dict[str, Any]], erased: list[tuple[dict[str, Any], Correction]]
) -> list[Entry]:
    """The ledger's runs with each erased receipt put back where it stood: right after the
    receipt its back-link names (at the start for a null link); by time when it has no
    back-link (a receipt from before them) or its predecessor was erased without its text."""
    entries = [Entry(r) for r in receipts]
    waiting = sorted(erased, key=lambda rc: rc[1].line)
    while waiting:
        shas = [e.receipt["receipt_sha256"] for e in entries]
        ready = [
            rc for rc in waiting if rc[0].get("previous_receipt_sha256", None) in (None, *shas)
        ]
        receipt, correction = (ready or waiting)[0]
        waiting.remove((receipt, correction))
        entries.insert(_position(entries, receipt), Entry(receipt, correction))
    return entries


def _position(entries: list[Entry], receipt: dict[str, Any]) -> int:
    link = receipt.get("previous_receipt_sha256", "")
    shas = [e.receipt["receipt_sha256"] for e in entries]
    if link is not None and link not in shas:  # no back-link, or its run is gone: by time
        return next(
            (i for i, e in enumerate(entries) if e.receipt["created"] > receipt["created"]),
            len(entries),
        )
    at = 0 if link is None else shas.index(link) + 1
    while (  # after any run erased from the same place before it
        at < len(entries)
        and entries[at].erased_by is not None
        and entries[at].receipt.get("previous_receipt_sha256") == link
    ):
        at += 1
    return at
