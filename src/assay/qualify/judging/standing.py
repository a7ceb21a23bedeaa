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

from assay.qualify.judging.device import (
    DeviceStanding,
    Missing,
    Retired,
    StandingFailure,
    claim_ids,
    count,
    device_standing,
    explain_failures,
    names,
    retired_after,
)
from assay.qualify.judging.evidence import Entry, with_erased
from assay.qualify.ledger.corrections import CORRECTIONS, Correction

__all__ = ["STATUS_ORDER", "DeviceStanding", "Missing", "Retired", "Standing", "StandingFailure"]

STATUS_ORDER = ("broken", "fail", "incomplete", "inconclusive", "no complete run", "pass")


# Characters of why an index's status cell shows after the status word.
BRIEF_LIMIT = 80


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
            kept = f" ({len(unknown)} erasing a receipt whose text is not kept: {names(lines)})"
            out.append(
                f"{count(len(self.acknowledged), 'acknowledged ledger rewrite')}"
                + (kept if unknown else "")
            )
        corrected = [
            c for r in self.receipts for c in r["corrects"] if c["claim_id"] in claim_ids(r)
        ]
        if corrected:
            shown = [f"{c['claim_id']} of {c['receipt_sha256'][:12]}" for c in corrected]
            out.append(f"{count(len(corrected), 'correction')}: {names(shown)}")
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
            parts.append(f"{count(len(self.problems), 'problem')} in the ledger")
        several = len(self.devices) > 1
        for d in self.devices:
            why = [*d.reasons(), *d.qualifiers()]
            if why or several:
                parts.append(f"{d.device}: {d.status}" + (f" ({'; '.join(why)})" if why else ""))
        parts.extend(self.qualifiers())
        return self.status + (f": {'; '.join(parts)}" if parts else "")

    def brief(self, limit: int = BRIEF_LIMIT) -> str:
        """The status word and at most about ``limit`` characters of why, what an index shows:
        each phrase of :meth:`summary` without its list of names, as many as fit, then ``…``
        when some did not. The gate's record page holds the whole summary."""
        phrases = []
        if self.problems:
            phrases.append(f"{count(len(self.problems), 'problem')} in the ledger")
        several = len(self.devices) > 1
        for d in self.devices:
            heads = [_head(p) for p in (*d.reasons(), *d.qualifiers())]
            if several:
                phrases.append(
                    f"{d.device}: {d.status}" + (f" ({', '.join(heads)})" if heads else "")
                )
            else:
                phrases.extend(heads)
        phrases.extend(_head(q) for q in self.qualifiers())
        shown = ""
        for phrase in phrases:
            joined = f"{shown}; {phrase}" if shown else phrase
            if len(joined) > limit:
                shown = f"{shown}; …" if shown else phrase[:limit].rstrip() + "…"
                break
            shown = joined
        return self.status + (f": {shown}" if shown else "")


def _head(phrase: str) -> str:
    """``phrase`` up to its first ``: `` outside parentheses: the count without the names
    (``6 claims failed`` of ``6 claims failed: a, b and 4 more``)."""
    depth = 0
    for i, char in enumerate(phrase):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and phrase.startswith(": ", i):
            return phrase[:i]
    return phrase


def headline(receipts: list[dict[str, Any]]) -> dict[str, Any]:
    """Of ``receipts`` in ledger order (oldest first), the newest complete one; the newest
    partial one only when none is complete. A run with ``-k``, ``--deselect``, node ids or an
    early stop never replaces a complete run as headline (or as baseline)."""
    complete = [r for r in receipts if not r["run"].get("partial")]
    return (complete or receipts)[-1]


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
    devices = [device_standing(d, es) for d, es in sorted(by_device.items())]
    # a correction retires a claim whichever device's receipt carries it
    for d in devices:
        still = []
        for m in d.missing:
            found = retired_after(m.claim_id, entries)
            if found is None:
                still.append(m)
            else:
                d.retired.append(Retired(m.claim_id, d.device, *found))
        d.missing = still
        explain_failures(d, entries)
    if root is not None:
        from assay.qualify.judging.stale import check_receipt

        for d in devices:
            d.stale = None if d.head is None else check_receipt(root, d.head)
    return Standing(gate, receipts, devices, list(problems or []), list(acknowledged or []))


def gate_standing(
    receipts_dir: Path,
    gate: str,
    records_dir: Path | None = None,
    root: Path | None = None,
    history: Any = None,
) -> Standing:
    """Load, check and judge one gate's ledger: the one standing every view shows. Its git
    history counts too: a rewrite nobody acknowledged (a receipt deleted, a LEDGER line
    removed) leaves the gate ``broken`` in every view, as ``verify`` reports it. ``history`` is
    a :class:`assay.qualify.ledger.history.HistoryReport` of the receipts folder, walked here
    when not given."""
    from assay.qualify.judging.loading import load_ledger
    from assay.qualify.ledger.history import gate_history

    ledger = load_ledger(receipts_dir, gate, records_dir)
    walked = history if history is not None else gate_history(receipts_dir, gate)
    return standing_of(
        gate,
        ledger.receipts,
        [*ledger.problems, *walked.problems_for(gate)],
        root,
        erased=ledger.erased,
        acknowledged=ledger.acknowledged,
    )
